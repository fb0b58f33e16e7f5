package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
)

// `towerd completion bash|zsh` prints a completion script generated from
// the subcommand table: the subcommands, each one's flags (read from its
// own -h, so a flag added to a subcommand is completed without touching
// this file) with what their values are (a file, a directory, or
// anything), and what the positional arguments take. Every flag completes
// as -flag and as --flag: Go's flag package takes both, and the usage lines
// write some with two dashes (install's --root, --dry-run), as GNU tools
// do (issue 25). The Debian package
// installs exactly this output, and its man page is written from
// `towerd help -json` (helpDocs), so there is one reading of the table.

// flagDoc is one flag as its subcommand's -h (flag.PrintDefaults) prints it.
type flagDoc struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"` // "string", "duration", ...; "" for a boolean
	Usage string `json:"usage"`
}

// commandDoc is one entry of the table with its flags: what `towerd help
// -json` prints, one per subcommand.
type commandDoc struct {
	Name     string    `json:"name"`
	Synopsis string    `json:"synopsis"`
	Summary  string    `json:"summary"`
	Flags    []flagDoc `json:"flags"`
}

var (
	// "  -name type" (type absent for a boolean), then "    \tusage" lines;
	// or "  -x\tusage" for a one-letter boolean.
	flagLine      = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_.-]*)(?: (\S+))?$`)
	shortFlagLine = regexp.MustCompile(`^  -([A-Za-z0-9])\t(.*)$`)
)

// commandFlags returns the flags a subcommand's -h lists, sorted by name.
func commandFlags(c *base.Command) []flagDoc {
	if c.Name == "completion" || c.Name == "help" || c.Name == "version" {
		return nil // no flags; `version -h` is an error, help's -h is the overview
	}
	var out bytes.Buffer
	c.Run([]string{"-h"}, &out, &out)
	return parseFlagHelp(out.String())
}

func parseFlagHelp(help string) []flagDoc {
	var flags []flagDoc
	lines := strings.Split(help, "\n")
	for i := 0; i < len(lines); i++ {
		if m := shortFlagLine.FindStringSubmatch(lines[i]); m != nil {
			flags = append(flags, flagDoc{Name: m[1], Usage: strings.TrimSpace(m[2])})
			continue
		}
		m := flagLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		f := flagDoc{Name: m[1], Value: m[2]}
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    ") {
			i++
			f.Usage = strings.TrimSpace(f.Usage + " " + strings.TrimSpace(lines[i]))
		}
		flags = append(flags, f)
	}
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	return flags
}

// helpDocs writes the table with every subcommand's flags as JSON: the
// hidden `towerd help -json`, which cmd/towerd/dist renders as towerd(8).
func helpDocs(w io.Writer) error {
	docs := make([]commandDoc, 0, len(commands))
	for _, c := range commands {
		docs = append(docs, commandDoc{Name: c.Name, Synopsis: c.Synopsis, Summary: c.Summary, Flags: commandFlags(c)})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(docs)
}

// valueKind is what a flag's value is, for completing it: "" for a
// boolean, "file", "dir", or "value" (anything: nothing is offered).
func valueKind(f flagDoc) string {
	switch {
	case f.Value == "":
		return ""
	case strings.Contains(f.Name, "config") || strings.HasSuffix(f.Name, "file") || strings.Contains(f.Value, "FILE") || f.Name == "control":
		return "file"
	case strings.HasSuffix(f.Name, "dir") || f.Name == "root":
		return "dir"
	}
	return "value"
}

// argSpec is what one positional argument takes: a fixed set of words, a
// file, or (neither) anything, which is not completed.
type argSpec struct {
	name  string
	words []string
	file  bool
}

// positionals are a subcommand's positional arguments, in order.
func positionals(name string) []argSpec {
	switch name {
	case "log-queries":
		return []argSpec{{name: "state", words: []string{"on", "off"}}}
	case "completion":
		return []argSpec{{name: "shell", words: []string{"bash", "zsh"}}}
	case "help":
		firsts, _ := completionGroups()
		return []argSpec{{name: "subcommand", words: firsts}}
	case "lookup":
		return []argSpec{{name: "name"}, {name: "type", words: []string{"A", "AAAA", "CNAME", "MX", "NS", "PTR", "SOA", "SRV", "TXT", "CAA", "HTTPS", "SVCB"}}}
	case "flush":
		return []argSpec{{name: "name"}}
	case "import-dnsmasq", "cache dump", "cache load":
		return []argSpec{{name: "file", file: true}}
	}
	return nil
}

// completionGroups are the first words of the subcommands, and for each
// group word ("cache") its second words.
func completionGroups() (firsts []string, seconds map[string][]string) {
	seconds = map[string][]string{}
	for _, c := range commands {
		first, second, two := strings.Cut(c.Name, " ")
		if len(firsts) == 0 || firsts[len(firsts)-1] != first {
			firsts = append(firsts, first)
		}
		if two {
			seconds[first] = append(seconds[first], second)
		}
	}
	return firsts, seconds
}

func completionCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && isHelpFlag(args[0]) {
		fmt.Fprintln(stdout, "usage: towerd completion bash|zsh")
		fmt.Fprintln(stdout, "  bash: towerd completion bash > /etc/bash_completion.d/towerd (or source it)")
		fmt.Fprintln(stdout, "  zsh:  towerd completion zsh > \"${fpath[1]}/_towerd\"")
		return exitOK
	}
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		fmt.Fprintln(stderr, "towerd completion: name the shell: bash or zsh")
		fmt.Fprintln(stderr, "usage: towerd completion bash|zsh")
		return exitConfig
	}
	if args[0] == "bash" {
		writeBashCompletion(stdout)
	} else {
		writeZshCompletion(stdout)
	}
	return exitOK
}

// shellQuote quotes s for bash and zsh in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func writeBashCompletion(w io.Writer) {
	firsts, seconds := completionGroups()
	fmt.Fprintf(w, `# bash completion for towerd; generated by `+"`towerd completion bash`"+`; do not edit.
# Works with and without the bash-completion package.
_towerd() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=""
	(( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}
	if (( COMP_CWORD == 1 )) && [[ $cur != -* ]]; then
		COMPREPLY=($(compgen -W %s -- "$cur")); return
	fi
	# "towerd -config x" is serve: a subcommand is only ever the first word.
	local cmd=serve first=1
	if [[ ${COMP_WORDS[1]} != -* ]]; then
		cmd=${COMP_WORDS[1]} first=2
	fi
	case $cmd in
`, shellQuote(strings.Join(firsts, " ")))
	for _, g := range firsts {
		if seconds[g] == nil {
			continue
		}
		fmt.Fprintf(w, "\t%s)\n", g)
		fmt.Fprintf(w, "\t\tif (( COMP_CWORD == 2 )); then\n\t\t\tCOMPREPLY=($(compgen -W %s -- \"$cur\")); return\n\t\tfi\n", shellQuote(strings.Join(seconds[g], " ")))
		fmt.Fprintln(w, "\t\tcmd=\"$cmd ${COMP_WORDS[2]}\" first=3 ;;")
	}
	fmt.Fprintln(w, "\tesac")
	fmt.Fprintln(w, `	# args: what each positional argument takes: words, @file, or "" (anything).`)
	fmt.Fprintln(w, `	local flags="" files=" " dirs=" " values=" " args=()`)
	fmt.Fprintln(w, "\tcase $cmd in")
	for _, c := range commands {
		var flags, files, dirs, values []string
		for _, f := range commandFlags(c) {
			flags = append(flags, "-"+f.Name)
			switch valueKind(f) {
			case "file":
				files = append(files, "-"+f.Name, "--"+f.Name)
			case "dir":
				dirs = append(dirs, "-"+f.Name, "--"+f.Name)
			case "value":
				values = append(values, "-"+f.Name, "--"+f.Name)
			}
		}
		var args []string
		for _, a := range positionals(c.Name) {
			switch {
			case a.file:
				args = append(args, "@file")
			default:
				args = append(args, shellQuote(strings.Join(a.words, " ")))
			}
		}
		fmt.Fprintf(w, "\t%s)\n\t\tflags=%s\n\t\tfiles=%s dirs=%s\n\t\tvalues=%s\n\t\targs=(%s) ;;\n", shellQuote(c.Name),
			shellQuote(strings.Join(flags, " ")), shellQuote(" "+strings.Join(files, " ")+" "),
			shellQuote(" "+strings.Join(dirs, " ")+" "), shellQuote(" "+strings.Join(values, " ")+" "), strings.Join(args, " "))
	}
	fmt.Fprint(w, `	esac
	if [[ $prev == -* && $prev != *=* ]]; then
		if [[ $files == *" $prev "* ]]; then
			COMPREPLY=($(compgen -f -- "$cur")); return
		elif [[ $dirs == *" $prev "* ]]; then
			COMPREPLY=($(compgen -d -- "$cur")); return
		elif [[ $values == *" $prev "* ]]; then
			COMPREPLY=(); return
		fi
	fi
	# $flags are the -flag forms; --flag completes from them with one more
	# dash in front.
	if [[ $cur == --* ]]; then
		COMPREPLY=($(compgen -P - -W "$flags" -- "${cur#-}")); return
	elif [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur")); return
	fi
	# Which positional argument this is: the words before it that are
	# neither flags nor a flag's value.
	local i n=0 w
	for (( i = first; i < COMP_CWORD; i++ )); do
		w=${COMP_WORDS[i]}
		if [[ $w == -* ]]; then
			[[ $w != *=* && "$files$dirs$values" == *" $w "* ]] && (( i++ ))
			continue
		fi
		(( n++ ))
	done
	case ${args[n]-} in
	@file) COMPREPLY=($(compgen -f -- "$cur")) ;;
	"") COMPREPLY=() ;;
	*) COMPREPLY=($(compgen -W "${args[n]}" -- "$cur")) ;;
	esac
}
complete -o filenames -F _towerd towerd
`)
}

// zshText makes help text safe in an _arguments spec or a _describe
// entry: no brackets, colons or quotes that would end a field.
func zshText(s string) string {
	s = strings.NewReplacer("[", "(", "]", ")", ":", " ", `\`, "", "`", "").Replace(s)
	if len(s) > 70 {
		if i := strings.LastIndex(s[:70], " "); i > 0 {
			s = s[:i] + " ..."
		}
	}
	return s
}

func writeZshCompletion(w io.Writer) {
	firsts, seconds := completionGroups()
	fmt.Fprint(w, `#compdef towerd
# zsh completion for towerd; generated by `+"`towerd completion zsh`"+`; do not edit.
_towerd() {
	local -a commands
	commands=(
`)
	for _, first := range firsts {
		summary := strings.Join(seconds[first], ", ")
		if c, _ := findCommand([]string{first}); c != nil {
			summary = c.Summary
		}
		fmt.Fprintf(w, "\t\t%s\n", shellQuote(first+":"+zshText(summary)))
	}
	fmt.Fprint(w, `	)
	if (( CURRENT == 2 )) && [[ $PREFIX != -* ]]; then
		_describe -t commands 'towerd subcommand' commands
		return
	fi
	# "towerd -config x" is serve: a subcommand is only ever the first word.
	local cmd=serve
	if [[ $words[2] != -* ]] && (( CURRENT > 2 )); then
		cmd=$words[2]
		shift words
		(( CURRENT-- ))
	fi
	case $cmd in
`)
	for _, g := range firsts {
		if seconds[g] == nil {
			continue
		}
		fmt.Fprintf(w, "\t(%s)\n", g)
		fmt.Fprintf(w, "\t\tif (( CURRENT == 2 )); then\n\t\t\tcompadd -- %s\n\t\t\treturn\n\t\tfi\n", strings.Join(seconds[g], " "))
		fmt.Fprintln(w, "\t\tcmd=\"$cmd $words[2]\"\n\t\tshift words\n\t\t(( CURRENT-- )) ;;")
	}
	fmt.Fprintln(w, "\tesac")
	fmt.Fprintln(w, "\tcase $cmd in")
	for _, c := range commands {
		fmt.Fprintf(w, "\t(%s)\n\t\t_arguments -s", shellQuote(c.Name))
		for _, f := range commandFlags(c) {
			spec := "[" + zshText(f.Usage) + "]"
			switch valueKind(f) {
			case "file":
				spec += ":file:_files"
			case "dir":
				spec += ":directory:_files -/"
			case "value":
				spec += ":" + zshText(f.Value) + ": "
			}
			// _arguments' idiom for one option spelled two ways: the
			// brace expansion gives both specs, and the exclusion list
			// keeps either from being offered after the other. Flag
			// names are letters, digits, '_', '.' and '-': safe outside
			// quotes.
			fmt.Fprintf(w, " \\\n\t\t\t%s{-%s,--%s}%s", shellQuote("(-"+f.Name+" --"+f.Name+")"), f.Name, f.Name, shellQuote(spec))
		}
		for i, a := range positionals(c.Name) {
			action := " "
			switch {
			case a.file:
				action = "_files"
			case len(a.words) > 0:
				action = "(" + strings.Join(a.words, " ") + ")"
			}
			fmt.Fprintf(w, " \\\n\t\t\t%s", shellQuote(fmt.Sprintf("%d:%s:%s", i+1, a.name, action)))
		}
		fmt.Fprint(w, " ;;\n")
	}
	fmt.Fprint(w, `	esac
}
# Autoloaded from $fpath, or sourced: complete now. Sourced into a shell
# that has compinit's compdef: register.
if [[ ${zsh_eval_context[-1]} != loadautofunc ]] && (( $+functions[compdef] )); then
	compdef _towerd towerd
else
	_towerd "$@"
fi
`)
}
