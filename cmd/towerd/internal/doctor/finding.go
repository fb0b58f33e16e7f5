// Package doctor is `towerd doctor` (issue 27): it audits a node for the
// settings that turn a slow or lossy shared resolver into many services
// failing at once, before the day it happens, and prints each finding with
// its severity, what it saw, why it matters on a bad day, and the fix.
//
// It is laid out like node_exporter's collectors: the readers (read*.go)
// gather a Node — the files of a node under a root, towerd's config, the
// running towerd's /stats, the local Consul agent's HTTP API, Prometheus
// rules — each with a size and time bound, and the checks are pure
// functions of that Node, tested on fixtures. The reasoning and fix of
// every finding live once, in the catalog (catalog.go), which
// docs/doctor.md follows.
package doctor

import (
	"encoding/json"
	"fmt"
)

// Severity ranks a finding. The exit status is the highest one found.
type Severity int

// The severities, lowest first.
const (
	// Info is worth knowing; it does not change the exit status.
	Info Severity = iota
	// Warning is a setting that costs on the bad day: exit status 1.
	Warning
	// Problem fails lookups, or will: exit status 2.
	Problem
)

var severityNames = [...]string{Info: "info", Warning: "warning", Problem: "problem"}

func (s Severity) String() string {
	if s < Info || s > Problem {
		return fmt.Sprintf("severity(%d)", int(s))
	}
	return severityNames[s]
}

// MarshalText writes the severity's name, as -json shows it.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity's name.
func (s *Severity) UnmarshalText(b []byte) error {
	for i, n := range severityNames {
		if n == string(b) {
			*s = Severity(i)
			return nil
		}
	}
	return fmt.Errorf("unknown severity %q", b)
}

// Finding is one thing doctor found. ID, Area, Title, Why and Fix come
// from the catalog; Saw and Items say what this node has.
type Finding struct {
	// ID is stable across releases: scripts and docs/doctor.md use it.
	ID       string   `json:"id"`
	Area     string   `json:"area"`
	Severity Severity `json:"severity"`
	Title    string   `json:"title"`
	// Saw is what doctor read, in one or two sentences.
	Saw string `json:"saw"`
	// Items are the things concerned, one each (a check, a service, a
	// nameserver), when there is more than one kind of thing to name.
	Items []Item `json:"items,omitempty"`
	// Why is what the setting does on a bad day.
	Why string `json:"why"`
	// Fix is what to change.
	Fix string `json:"fix"`
}

// Item is one thing a finding concerns.
type Item struct {
	Subject string `json:"subject"`
	Detail  string `json:"detail,omitempty"`
}

// newFinding starts a finding of the catalog's entry id.
func newFinding(id string, sev Severity, saw string, args ...any) Finding {
	s, ok := catalogByID[id]
	if !ok {
		panic("doctor: finding " + id + " is not in the catalog")
	}
	if len(args) > 0 {
		saw = fmt.Sprintf(saw, args...)
	}
	return Finding{ID: id, Area: s.Area, Severity: sev, Title: s.Title, Saw: saw, Why: s.Why, Fix: s.Fix}
}

// with adds an item.
func (f Finding) with(subject, detail string, args ...any) Finding {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	f.Items = append(f.Items, Item{Subject: subject, Detail: detail})
	return f
}

// Skip is an area, or part of one, doctor could not look at, and why.
type Skip struct {
	Area   string `json:"area"`
	Reason string `json:"reason"`
}

// Schema names the -json document's shape. It changes only when a field
// changes meaning or goes away; fields are added without changing it.
const Schema = "towerd-doctor/1"

// Report is what `towerd doctor -json` prints.
type Report struct {
	Schema   string    `json:"schema"`
	Root     string    `json:"root"`
	Findings []Finding `json:"findings"`
	Skipped  []Skip    `json:"skipped"`
	Summary  Counts    `json:"summary"`
}

// Counts counts the findings by severity and gives the exit status.
type Counts struct {
	Problems int `json:"problems"`
	Warnings int `json:"warnings"`
	Info     int `json:"info"`
	Exit     int `json:"exit"`
}

// summarize counts findings; the exit status is 0 when nothing is above
// Info, 1 with warnings, 2 with problems.
func summarize(findings []Finding) Counts {
	var s Counts
	for _, f := range findings {
		switch f.Severity {
		case Problem:
			s.Problems++
		case Warning:
			s.Warnings++
		default:
			s.Info++
		}
	}
	switch {
	case s.Problems > 0:
		s.Exit = 2
	case s.Warnings > 0:
		s.Exit = 1
	}
	return s
}

// writeJSON prints the report, indented, with empty lists as [] rather
// than null so that consumers need not tell the two apart.
func (r Report) writeJSON(enc *json.Encoder) error {
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Skipped == nil {
		r.Skipped = []Skip{}
	}
	return enc.Encode(r)
}
