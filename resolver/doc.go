// Package resolver answers DNS queries: request checks, routing to a zone's
// upstream, the cache with serve-stale and prefetch, coalescing of identical
// misses, and answer shaping. It is straight code, not a plugin chain:
// ServeDNS → checks → route → cache → coalesce → upstream → store → write.
//
// # Answer routes
//
// A query reaches an answer by one of six routes:
//
//  1. Fast hit (fastpath.go answerPacket): a plain query whose answer is
//     fresh in the cache, or one a RecordSource writes as bytes
//     (recordsPacket), is answered from the packet's bytes into a reused
//     buffer, with no allocation, by the reader of a UDP socket bound to
//     one address (udp.go) or by a TCP connection's loop (tcp.go); so is
//     one whose entry expired when its stale answer is due at once
//     (stalePacket: the records with the stale answer TTL, EDE 3), the
//     refresh it starts a flight like a prefetch.
//  2. Fast reject (fastpath.go rejectPacket): the same readers, a miss with
//     no cache entry while the in-flight cap is full or the question
//     failed lately (failures.go), as the miss decision says: SERVFAIL at
//     once.
//  3. UDP general (udp.go servePacket → ServeDNS): everything routes 1,
//     2 and 6 decline on such a socket, on a goroutine of its own (a
//     reused one: workers.go).
//  4. TCP general (tcp.go serveConn → servePacket → ServeDNS): everything
//     the fast path declines on a TCP connection, on the connection's
//     goroutine. The TCP loop (issue 13) caps connections across listeners
//     (tcpbudget.go), reads a query only after its length is at most
//     MaxTCPQuerySize, and puts deadlines on idling, reading and writing.
//     A connection's queries are pipelined (tcppipe.go, RFC 7766
//     §6.2.1.1): up to maxPipelined wait for their answers at once, each
//     written as it comes.
//  5. Wildcard UDP via dns.Server (server.go AddPacketConn, a socket bound
//     to 0.0.0.0 or ::, which must answer from the address each query was
//     sent to) → ServeDNS.
//  6. Wire miss (wiremiss.go, issues 17 and 22): the readers of route 1,
//     a UDP socket's and a TCP connection's, on a miss whose question has
//     no entry in the cache at all, keep the packet's bytes in a pooled
//     waiter that starts or joins the question's flight; the reader that
//     starts it sends the first attempt itself (flight.start). When the
//     flight ends (on the upstream's attempt reader for a first reply
//     that is an answer of the zone's own: no goroutine woken, no
//     dns.Msg), each waiter is answered from the prepared entry with
//     route 1's writer, where the flight ends: over UDP by a raw
//     non-blocking sendto, over TCP by a raw non-blocking sendmsg on the
//     connection (tcpPipe). An answer that does not fit the client's size
//     is truncated by ServeDNS's code on a goroutine; failures and the
//     client's query_timeout give SERVFAIL (the one deadline heap).
//     General-path clients of the question share the flight.
//
// Every rule lives once, and every route uses it (request.go):
//
//   - Header rules (QR dropped, opcode → NOTIMP, QDCOUNT → FORMERR):
//     acceptHeader, run on the header before parsing by AcceptRequest
//     (dns.Server, route 5), servePacket (routes 3 and 4) and the fast
//     parser (routes 1, 2 and 6).
//   - Admission (header rules again, allow-list → REFUSED, two OPT records →
//     FORMERR, EDNS version → BADVERS, class and AXFR/IXFR → REFUSED): admit,
//     over a request value filled by plainQuery.parse (routes 1, 2, 6) or
//     request.fromMsg (ServeDNS). The fast path declines what admit refuses;
//     ServeDNS writes the refusal.
//   - Reply framing (QR, RA, RD and CD from the request, RFC 6840 AD, OPT
//     with the client's DO, EDE 3 on stale and 22 on SERVFAIL, the size
//     limit: min(client's size, MaxUDPSize) over UDP, 512 without EDNS,
//     64 KiB over TCP, the fast path's included): replyShape, written as
//     bytes by dnswire's one reply encoder (dnswire.Reply: the OPT record
//     with extended rcode and EDE, then the header) for the fast path's
//     replies (replyShape.closeReply: hits, stale answers, SERVFAIL) and
//     every error reply of the general path (replyShape.appendEmptyReply:
//     REFUSED, FORMERR, BADVERS, SERVFAIL, the panic's; servePacket's
//     FORMERR and NOTIMP), and on a dns.Msg by replyShape.apply for
//     answers with records. A stale answer's TTL is
//     settings.staleTTLSeconds, written by the cache's TTL writer on bytes
//     (cache.AppendStale) and by withTTL on a dns.Msg.
//   - The Consul cut (a UDP answer under the Consul domain cut as the
//     agent cuts its own, Config.TrimUDP): package consulcut, on an
//     answer's bytes (Class.Cuts, Class.Keep, Cut: syncExtra's additional
//     records). For a client without EDNS it is decided once: a cache
//     entry's cut answer when the entry is made (cutForNarrow, settle;
//     cache.WireAnswer.SetCut), a watched answer's count when the watch
//     encodes it; a hit asked with consulcut.NarrowTag writes the stored
//     cut. The fast path cuts per question only what was not decided so
//     (cutAsConsul: A or AAAA records alone by slicing, others written
//     again, cutWritten); ServeDNS keeps the records the same plan keeps
//     (trim.go, cutMsgLikeConsul); an answer of more than maxCutRecords
//     records cut per question, or one still too big once cut, is
//     ServeDNS's.
//   - Records before the cache: ServeDNS asks RecordSource.Answer (the
//     daemon's is a Chain: local data, resolver/local, then the Consul
//     watch; the first that answers wins and names the source, and its why
//     — the rule that answered, or why the watch passed the name on — goes
//     into the observation, Query.Rule and Query.Passed). The fast path
//     writes a covered name's answer as bytes when the source that covers
//     it can (RecordAppender, recordsPacket: every answer the Consul
//     watch holds, its forms, A, AAAA, SRV and NODATA, fresh or stale,
//     encoded when the watch delivers the record set) and declines every
//     other name RecordSource.Covers, the union of a Chain's: for the
//     watch, the names it holds and the service names whose questions ask
//     for a watch; the rest of the Consul domain is the cache's.
//   - Miss decision (failure recheck, join or start a resolution, cap full →
//     stale or SERVFAIL): Handler.planMiss; the fast reject is its answer
//     for a question with no cache entry, the fast path's stale answer its
//     answer for an expired one, and the wire miss (route 6) its "join or
//     start" for a question with no entry (flights.joinWire, under the
//     same lock and cap as join).
//   - How long a client with a stale answer waits for the refresh:
//     settings.staleWait, for ServeDNS and the fast path alike: at once
//     for an entry that only just expired (staleAtOnce) or with every
//     server of the zone down, else what is left of the client response
//     timer, counted from the refresh's start (flight.started). The fast
//     path answers only when it is 0; a client that waits goes to ServeDNS
//     with the refresh the fast path's miss decision joined or started
//     (plainQuery.joined, flightJoiner), and waits for that one refresh
//     whatever it ends in: one miss decision, one upstream query.
//   - Every wait for a flight (a wire waiter's query_timeout, a ServeDNS
//     client's query_timeout or stale timer): one deadline heap and timer
//     per handler (deadlines.go).
//   - Prefetch: Handler.prefetch, counted when a refresh starts; the window
//     is settings.wantsPrefetch.
//   - Search lists (issue 28, searchahead.go): a miss on a try of a lookup
//     that walks a search list (Config.Search) starts the lookup's later
//     names' resolutions from its own flight's start, as a prefetch
//     (flights.join, start, no waiter), within half the cap; settle keeps
//     their NXDOMAINs apart from the cache (searchheld.go); the miss
//     decision (planMiss, and missPacket for route 6) answers a later try
//     with one, as a flight already done, within Config.SearchHold.
//   - The resolution (resolution.go), one for every miss, prefetch and
//     refresh, whichever route started it: the upstream query
//     (appendUpstreamQuery: RD, AD always, RFC 6840 §5.7, the key's CD
//     and DO), the zone's Upstream.StartWire (one upstream.WireCall moved
//     by events, with one end: attempts, RTO, health, TC → TCP, the
//     scrubber, told the zones configured below: a chain that enters one
//     is chased there, chase.go, never believed), and one
//     settle (Handler.settle): the entry made by the cache's one entry
//     builder from the reply's bytes (cache.PrepareAnswer, which the
//     snapshot loader uses too), stored, removed or failed by rcode.
//   - First answer: every waiter gets the reply as the prepared entry
//     shows it, a hit's TTLs and records right after storing; route 6
//     writes its bytes, ServeDNS unpacks them (WireAnswer.Message).
//   - DNS bytes: read and written by resolver/dnswire only (the view
//     Msg, the encoders Builder, Reply and AppendQuery, the names' rules,
//     AppendOPT); whether a name is inside a zone: dnswire.InZone on wire
//     names, dnswire.InZoneText on text (the router, the search list).
//   - Observation: Handler.observe, once per answer, before it is written.
//
// The contracts the resolver relies on are named interfaces with
// compile-time checks (contracts.go): RecordSource, Upstream (a zone's one
// upstream contract, upstream.Group's: nothing is found by a type
// assertion that a wrapper would lose) and the fast path's
// packetAnswerer. TestFastPathMatchesServeDNS* (stale answers included),
// TestFastRejectMatchesServeDNS* and FuzzFastPath (a warm cache and a
// stale one) hold the fast routes to ServeDNS's answers, over UDP and
// TCP, across client prefixes, query types and Records sources; TestWireMissMatchesServeDNS,
// TestWireMissOverTCPMatchesServeDNS and FuzzWireMiss hold route 6 to
// ServeDNS's answer for the same upstream reply.
package resolver
