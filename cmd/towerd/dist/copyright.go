package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// The binary is static: it carries the Go standard library and every module
// it imports, so the copyright file names each of them with its license,
// read from the module cache for the exact versions the binary records
// (`go version -m`). A license this cannot name stops the build, so a new
// dependency is looked at before it ships.

type module struct{ path, version, dir string }

func linkedModules(binary string) ([]module, error) {
	out, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		return nil, fmt.Errorf("go version -m %s: %w", binary, err)
	}
	cache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return nil, err
	}
	var mods []module
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "dep" {
			continue
		}
		if len(f) >= 5 && f[3] == "=>" { // replaced
			f[1], f[2] = f[4], f[5]
		}
		dir := filepath.Join(strings.TrimSpace(string(cache)), escapeModulePath(f[1])+"@"+f[2])
		mods = append(mods, module{path: f[1], version: f[2], dir: dir})
	}
	return mods, nil
}

// escapeModulePath is the module cache's case encoding: an upper-case
// letter becomes '!' and its lower case.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// classify names a license text by its Debian short name. Expat is what
// Debian calls the MIT license.
func classify(text string) (string, error) {
	t := strings.Join(strings.Fields(text), " ")
	switch {
	case strings.Contains(t, "Mozilla Public License") && strings.Contains(t, "2.0"):
		return "MPL-2.0", nil
	case strings.Contains(t, "Apache License") && strings.Contains(t, "Version 2.0"):
		return "Apache-2.0", nil
	case strings.Contains(t, "Permission is hereby granted, free of charge"):
		return "Expat", nil
	case strings.Contains(t, "Redistribution and use in source and binary forms") && strings.Contains(t, "Neither the name"):
		return "BSD-3-Clause", nil
	case strings.Contains(t, "Redistribution and use in source and binary forms"):
		return "BSD-2-Clause", nil
	case strings.Contains(t, "Permission to use, copy, modify, and/or distribute"):
		return "ISC", nil
	}
	return "", fmt.Errorf("unknown license")
}

var copyrightLine = regexp.MustCompile(`(?i)^\s*copyright\s+(\(c\)\s*)?[0-9]`)

// licenseOf reads a module's license file and NOTICE.
func licenseOf(dir string) (name, text, holders, notice string, err error) {
	var file string
	for _, n := range []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "COPYING", "license", "License"} {
		if _, e := os.Stat(filepath.Join(dir, n)); e == nil {
			file = filepath.Join(dir, n)
			break
		}
	}
	if file == "" {
		return "", "", "", "", fmt.Errorf("%s: no LICENSE file (is the module downloaded? go mod download)", dir)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", "", "", "", err
	}
	text = string(b)
	if name, err = classify(text); err != nil {
		return "", "", "", "", fmt.Errorf("%s: %w", file, err)
	}
	var hs []string
	for _, line := range strings.Split(text, "\n") {
		if copyrightLine.MatchString(line) {
			hs = append(hs, strings.TrimSpace(line))
		}
	}
	holders = strings.Join(hs, "\n")
	if n, e := os.ReadFile(filepath.Join(dir, "NOTICE")); e == nil {
		notice = string(n)
	}
	return name, text, holders, notice, nil
}

// indent formats text as a DEP-5 continuation: one leading space, empty
// lines as " .".
func indent(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		line = strings.TrimRight(line, " \t")
		if line == "" {
			b.WriteString(" .\n")
		} else {
			b.WriteString(" " + line + "\n")
		}
	}
	return b.String()
}

// copyrightFile writes /usr/share/doc/towerd/copyright in the Debian
// machine-readable format.
func copyrightFile(binary, ownLicense string) (string, error) {
	own, err := os.ReadFile(ownLicense)
	if err != nil {
		return "", err
	}
	ownName, err := classify(string(own))
	if err != nil {
		return "", fmt.Errorf("%s: %w", ownLicense, err)
	}
	var b strings.Builder
	b.WriteString("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
	b.WriteString("Upstream-Name: towerd\nSource: https://github.com/towerd/towerd\n")
	b.WriteString("Comment: /usr/bin/towerd is statically linked: it contains the Go\n")
	b.WriteString(" standard library and the Go modules listed below, at these versions.\n\n")
	var ownHolders []string
	for _, line := range strings.Split(string(own), "\n") {
		if copyrightLine.MatchString(line) {
			ownHolders = append(ownHolders, strings.TrimSpace(line))
		}
	}
	fmt.Fprintf(&b, "Files: *\nCopyright: %s\nLicense: %s\n%s\n", strings.Join(ownHolders, "\n "), ownName, indent(licenseBody(string(own))))

	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", err
	}
	mods := []module{{path: "Go standard library and runtime", dir: strings.TrimSpace(string(goroot))}}
	linked, err := linkedModules(binary)
	if err != nil {
		return "", err
	}
	mods = append(mods, linked...)
	var common []string
	for _, m := range mods {
		name, text, holders, notice, err := licenseOf(m.dir)
		if err != nil {
			return "", err
		}
		if holders == "" {
			holders = "the " + m.path + " authors"
		}
		label := m.path
		if m.version != "" {
			label += " " + m.version
		}
		fmt.Fprintf(&b, "Files: %s\nCopyright: %s\n", label, strings.ReplaceAll(holders, "\n", "\n "))
		switch name {
		case "Apache-2.0", "MPL-2.0":
			// The full texts are in /usr/share/common-licenses.
			fmt.Fprintf(&b, "License: %s\n", name)
			if !slices.Contains(common, name) {
				common = append(common, name)
			}
			if notice != "" {
				b.WriteString("Comment: its NOTICE file:\n" + indent(notice))
			}
		default:
			fmt.Fprintf(&b, "License: %s\n%s", name, indent(licenseBody(text)))
		}
		b.WriteString("\n")
	}
	for _, name := range common {
		fmt.Fprintf(&b, "License: %s\n On Debian systems, the complete text of the %s license is in\n /usr/share/common-licenses/%s.\n\n", name, name, name)
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}

// licenseBody drops the copyright lines (they are in the Copyright field).
func licenseBody(text string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if copyrightLine.MatchString(line) {
			continue
		}
		if strings.TrimSpace(line) == "" && len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
			continue // the copyright line left two blank lines
		}
		out = append(out, line)
	}
	return strings.Trim(strings.Join(out, "\n"), "\n")
}
