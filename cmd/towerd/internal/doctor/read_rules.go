package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Prometheus's rules, from a running Prometheus (-rules http://host:9090:
// /api/v1/rules, what it has loaded) or from rule files on the machine
// doctor runs on (-rules DIR or FILE: what it would load). The files are
// where the monitoring system keeps them, not on the node: they are read
// as given, not under --root, each bounded like a node file.

// promRuleFile is a rules file's shape (Prometheus's rulefmt).
type promRuleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string `yaml:"alert"`
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// promRulesAnswer is /api/v1/rules.
type promRulesAnswer struct {
	Data struct {
		Groups []struct {
			File  string `json:"file"`
			Rules []struct {
				Type  string `json:"type"` // "alerting" or "recording"
				Name  string `json:"name"`
				Query string `json:"query"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"data"`
}

func readRules(ctx context.Context, source string, timeout time.Duration) *rulesView {
	v := &rulesView{Source: source, Records: map[string]bool{}}
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		url := strings.TrimSuffix(source, "/")
		if !strings.HasSuffix(url, "/api/v1/rules") {
			url += "/api/v1/rules"
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var a promRulesAnswer
		if v.Err = getJSON(ctx, httpClient(""), url, nil, &a); v.Err != nil {
			return v
		}
		for _, g := range a.Data.Groups {
			for _, r := range g.Rules {
				v.add(r.Type == "alerting", r.Name, r.Query, g.File)
			}
		}
		return v
	}
	readRuleFiles(v, source)
	return v
}

func (v *rulesView) add(alerting bool, name, expr, from string) {
	if alerting {
		v.Alerts = append(v.Alerts, alertRule{Name: name, Expr: expr, From: from})
	} else if name != "" {
		v.Records[name] = true
	}
}

// readRuleFiles reads source, a rules file or a directory of them
// (*.yml, *.yaml; not its subdirectories).
func readRuleFiles(v *rulesView, source string) {
	info, err := os.Stat(source)
	if err != nil {
		v.Err = err
		return
	}
	dir, names := source, []string(nil)
	if !info.IsDir() {
		dir, names = filepath.Dir(source), []string{filepath.Base(source)}
	}
	nr, err := openRoot(dir)
	if err != nil {
		v.Err = err
		return
	}
	defer nr.Close()
	if names == nil {
		for _, e := range readDir(nr, "/") {
			if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yml") || strings.HasSuffix(e.Name(), ".yaml")) {
				names = append(names, e.Name())
			}
		}
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		data, err := nr.ReadFile("/" + name)
		var f promRuleFile
		if err == nil {
			err = yaml.Unmarshal(data, &f)
		}
		if err != nil {
			v.Unread = append(v.Unread, Item{Subject: path, Detail: oneLineErr(err)})
			continue
		}
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					v.add(true, r.Alert, r.Expr, path)
				} else {
					v.add(false, r.Record, r.Expr, path)
				}
			}
		}
	}
	if len(names) == 0 {
		v.Err = fmt.Errorf("no *.yml or *.yaml rule files in %s", dir)
	}
}
