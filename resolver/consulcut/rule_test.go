package consulcut

import "testing"

// Consul's trimUDPResponse on counts: without EDNS (and with EDNS at
// 512 bytes) at most min(udp_answer_limit, 8) records, measured without
// compression; then records go from the end until the message fits, in a
// binary search when over by more than 100 bytes; at least one stays.
func TestKeepFixed(t *testing.T) {
	const qlen = 24 // web.service.consul. A IN
	for _, tc := range []struct {
		class   Class
		answers int
		want    int
	}{
		{Narrow(3), 2, 2},
		{Narrow(3), 12, 3},
		{Narrow(20), 40, MaxAnswers},
		{Class{Limit: 512, EDNS: true, AnswerLimit: 3, Room: 11}, 12, 3},
		{Class{Limit: 1232, EDNS: true, AnswerLimit: 3, Room: 11}, 12, 12},
		// 16 bytes a record compressed: (1232-11-8-36)/16 = 73 fit.
		{Class{Limit: 1232, EDNS: true, AnswerLimit: 3, Room: 11}, 200, 73},
		{Class{Limit: 1232, EDNS: true, AnswerLimit: 3, Room: 11}, 80, 73},
	} {
		if got := tc.class.KeepFixed(tc.answers, qlen, 16); got != tc.want {
			t.Errorf("%+v, %d records: keeps %d, want %d", tc.class, tc.answers, got, tc.want)
		}
		size := 12 + qlen + tc.answers*16
		if cuts := tc.class.Cuts(tc.answers, size); cuts != (tc.want != tc.answers) {
			t.Errorf("%+v, %d records: Cuts %v, but keeps %d", tc.class, tc.answers, cuts, tc.want)
		}
	}
	// A long name: 8 of 9 records written out do not fit 512 bytes, by
	// far (992): halved to 4 (552, too many), 2 (332), 3 (442).
	if got := Narrow(8).KeepFixed(9, 100, 16); got != 3 {
		t.Errorf("9 records of a 95-byte name: keeps %d, want 3", got)
	}
}

func TestNarrowTag(t *testing.T) {
	if NarrowTag(0) == 0 || NarrowTag(3) == NarrowTag(4) || NarrowTag(8) != NarrowTag(20) {
		t.Error("NarrowTag: want never 0, distinct below MaxAnswers, one above it")
	}
}
