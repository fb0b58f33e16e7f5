//go:build !race

package test

// raceEnabled: the tests run without -race, and so does the daemon.
const raceEnabled = false
