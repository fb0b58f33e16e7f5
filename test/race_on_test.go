//go:build race

package test

// raceEnabled: the tests run with -race, so the daemon is built with it too.
const raceEnabled = true
