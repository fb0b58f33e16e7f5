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
//     fresh in the cache is answered from the packet's bytes into a reused
//     buffer, with no allocation, by the reader of a UDP socket bound to
//     one address (udp.go) or by a TCP connection's loop (tcp.go).
//  2. Fast reject (fastpath.go rejectPacket): the same readers, a miss while
//     the in-flight cap is full and nothing stale exists: SERVFAIL at once.
//  3. UDP general (udp.go servePacket → ServeDNS): everything the fast
//     path declines on such a socket, on a goroutine of its own (a
//     reused one: workers.go).
//  4. TCP general (tcp.go serveConn → servePacket → ServeDNS): everything
//     the fast path declines on a TCP connection, on the connection's
//     goroutine. The TCP loop (issue 13) caps connections across listeners
//     (tcpbudget.go), reads a query only after its length is at most
//     MaxTCPQuerySize, and puts deadlines on idling, reading and writing.
//  5. Wildcard UDP via dns.Server (server.go AddPacketConn, a socket bound
//     to 0.0.0.0 or ::, which must answer from the address each query was
//     sent to) → ServeDNS.
//  6. Wire miss (wiremiss.go, issue 17): the reader of route 1, on a miss
//     whose question has no entry in the cache at all, keeps the packet's
//     bytes in a pooled waiter that starts or joins the question's flight;
//     the reader that starts it packs the upstream query into a pooled
//     buffer and sends its first attempt (upstream.Group.StartWire); when
//     that attempt's reply is the first and its wire check finds nothing to
//     scrub, the upstream's attempt reader makes the entry from its bytes
//     (cache.PrepareWire, byte for byte cache.Set's) and answers every wire
//     waiter from it with route 1's writer (flight.ReceiveWire): no
//     dns.Msg, no goroutine woken. Retransmissions, TC, failures and the
//     deadline run the resolution on a goroutine; what the wire checks
//     decline is unpacked and scrubbed on one and answered with ServeDNS's
//     code; failures and the client's query_timeout give SERVFAIL (one
//     deadline heap and timer per handler). General-path clients of the
//     question share the flight.
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
//     64 KiB over TCP, the fast path's included): replyShape, written as bytes by the fast path and
//     on a dns.Msg by replyShape.apply.
//   - Records before the cache: ServeDNS asks RecordSource.Lookup (the
//     daemon's is a Chain: local data, resolver/local, then the Consul
//     watch; the first that answers wins and names the source); the fast
//     path declines every name RecordSource.Covers, the union of a Chain's.
//   - Miss decision (failure recheck, join or start a resolution, cap full →
//     stale or SERVFAIL): Handler.planMiss; the fast reject is its answer
//     for a question with no cache entry, and the wire miss (route 6) its
//     "join or start" for such a question (flights.joinWire, under the
//     same lock and cap as join).
//   - Stale at once for an entry that only just expired (its refresh runs
//     behind the answer): settings.staleAtOnce, in ServeDNS after the miss
//     decision (the fast path answers fresh entries only); otherwise the
//     client response timer, counted from the refresh's start
//     (flight.started).
//   - Prefetch: Handler.prefetch, counted when a refresh starts; the window
//     is settings.wantsPrefetch.
//   - Upstream exchange (resolutions only, whichever route started them):
//     Handler.exchange (chase.go) scrubs through the zone's upstream and
//     chases a CNAME chain that leaves the zone through the zone that owns
//     the target, joining the answers; AD is set on every upstream query
//     (upstreamQuery).
//   - First answer: the clients waiting for a resolution get the reply as
//     cache.Shape makes it, the TTLs and records of a hit right after
//     storing; compression is the reply core's, on every route. Route 6
//     writes it from the prepared entry itself (cache.WireAnswer).
//   - Observation: Handler.observe, once per answer, before it is written.
//
// The contracts the resolver relies on are named interfaces with
// compile-time checks (contracts.go): RecordSource, HealthReporter, the
// fast path's packetAnswerer, the chase's (and query log's)
// scrubbingExchanger and the wire miss path's wireExchanger.
// TestFastPathMatchesServeDNS*, TestFastRejectMatchesServeDNS* and
// FuzzFastPath hold the fast routes to ServeDNS's answers byte for byte,
// over UDP and TCP, across client prefixes, query types and Records
// sources; TestWireMissMatchesServeDNS and FuzzWireMiss hold route 6 to
// ServeDNS's answer for the same upstream reply.
package resolver
