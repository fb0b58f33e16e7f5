package dnstest

import (
	"context"

	"github.com/miekg/dns"
)

// ExchangeFunc is an upstream in memory, for tests that need answers but
// no sockets (benchmarks, fuzzing, differential tests): Exchange calls the
// function. It has upstream.Upstream's methods without importing the
// package; Address is "memory" and Close does nothing.
type ExchangeFunc func(ctx context.Context, q *dns.Msg) (*dns.Msg, error)

// Exchange returns f(ctx, q).
func (f ExchangeFunc) Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) { return f(ctx, q) }

// Address names the upstream in logs and metrics: "memory".
func (ExchangeFunc) Address() string { return "memory" }

// Close does nothing and returns nil.
func (ExchangeFunc) Close() error { return nil }
