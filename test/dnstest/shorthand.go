package dnstest

// Shorthands for one kind of fault each. Unlike SetFault, which replaces a
// name's fault, each adds to it (the test upstream test/ had before the kit
// worked so, and tests written against it still call these).

// SetNXDOMAIN makes name answer NXDOMAIN (with TestSOA), whatever the zone
// says.
func (u *Upstream) SetNXDOMAIN(name string) { u.addFault(name, func(f *Fault) { f.NXDOMAIN = true }) }

// SetNODATA makes name answer NOERROR with no records and TestSOA.
func (u *Upstream) SetNODATA(name string) { u.addFault(name, func(f *Fault) { f.NODATA = true }) }

// SetRcode makes name answer rcode (e.g. SERVFAIL) with no records.
func (u *Upstream) SetRcode(name string, rcode int) {
	u.addFault(name, func(f *Fault) { f.Rcode = rcode })
}

// TruncateUDP makes name's UDP answers a bare TC reply; TCP gets the records.
func (u *Upstream) TruncateUDP(name string) {
	u.addFault(name, func(f *Fault) { f.TruncateUDP = true })
}

// addFault changes name's fault in place under the lock.
func (u *Upstream) addFault(name string, change func(*Fault)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f := u.faults[canonical(name)]
	change(&f)
	u.faults[canonical(name)] = f
}
