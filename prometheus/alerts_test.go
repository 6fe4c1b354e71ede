package prometheus_test

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/catchup"
	"github.com/ferry-inbox/ferry/prometheus"
)

// recorder is a Registerer that keeps what is registered, so a test can
// read every metric's name and labels without a store.
type recorder struct{ collectors []prom.Collector }

func (r *recorder) Register(c prom.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}
func (r *recorder) MustRegister(cs ...prom.Collector) { r.collectors = append(r.collectors, cs...) }
func (r *recorder) Unregister(prom.Collector) bool    { return false }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	selector   = regexp.MustCompile(`\b(ferry_[a-z_]+)(\{([^}]*)\})?`)
	matcher    = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"`)
)

// Every metric and label docs/alerts.yml names is one the service exports,
// so the example rules cannot silently watch a series that never exists.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	prometheus.NewMetrics(rec, []string{"stripe"})
	prometheus.NewCatchupMetrics(rec, []string{"stripe"})
	rec.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Sources: []string{"stripe"}}))
	labels := map[string][]string{} // metric name → its labels
	for _, c := range rec.collectors {
		ch := make(chan *prom.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			name := descName.FindStringSubmatch(s)[1]
			var ls []string
			if m := descLabels.FindStringSubmatch(s); m != nil && m[1] != "" {
				ls = strings.Split(m[1], ",")
			}
			labels[name] = ls
			if _, ok := c.(*prom.HistogramVec); ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					labels[name+suffix] = append(slices.Clone(ls), "le")
				}
			}
		}
	}
	raw, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs := ruleExprs(string(raw))
	for _, expr := range exprs {
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			name := sel[1]
			known, ok := labels[name]
			if !ok {
				t.Errorf("docs/alerts.yml names %s, which the service does not export", name)
				continue
			}
			for _, m := range matcher.FindAllStringSubmatch(sel[3], -1) {
				if !slices.Contains(known, m[1]) {
					t.Errorf("docs/alerts.yml: %s has no label %q (it has %v)", name, m[1], known)
				}
				if m[1] == "state" && !ferry.State(m[2]).Valid() {
					t.Errorf("docs/alerts.yml: %s{state=%q} is not a state", name, m[2])
				}
			}
		}
	}
	if len(exprs) == 0 {
		t.Fatal("docs/alerts.yml has no expr")
	}
}

// ruleExprs returns the expr of every rule in a rules file: one on its
// line, or a block scalar (expr: >-) on the lines indented below it.
func ruleExprs(rules string) []string {
	var exprs []string
	lines := strings.Split(rules, "\n")
	for i, line := range lines {
		head, expr, ok := strings.Cut(line, "expr:")
		if !ok {
			continue
		}
		if v := strings.TrimSpace(expr); v != "" && v[0] != '>' && v[0] != '|' {
			exprs = append(exprs, expr)
			continue
		}
		var block []string
		for _, next := range lines[i+1:] {
			if indent := len(next) - len(strings.TrimLeft(next, " ")); strings.TrimSpace(next) != "" && indent <= len(head) {
				break
			}
			block = append(block, next)
		}
		exprs = append(exprs, strings.Join(block, "\n"))
	}
	return exprs
}

// FerryCatchupFailing fires at the checkpoint age catchup.FailingAfter
// gives, the one ferry doctor fails at: one rule, two readers.
func TestAlertCatchupFailingIsFailingAfter(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	per, floor := catchup.FailingAfter(time.Second)-catchup.FailingAfter(0), catchup.FailingAfter(0)
	want := fmt.Sprintf("max by (source) (ferry_catchup_checkpoint_age_seconds) > %d * max by (source) (ferry_catchup_interval_seconds) + %d", per/time.Second, floor/time.Second)
	if !strings.Contains(string(raw), want) {
		t.Fatalf("docs/alerts.yml has no FerryCatchupFailing threshold %q (catchup.FailingAfter)", want)
	}
}

// Every delivery outcome and reason docs/alerts.yml watches starts at zero
// for each configured source: increase() and rate() need a sample before a
// process's first 503 or rejection, or they miss it.
func TestAlertRulesSeeTheFirstDelivery(t *testing.T) {
	t.Parallel()
	reg := prom.NewRegistry()
	prometheus.NewMetrics(reg, []string{"stripe"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{} // "outcome/reason" of stripe's series
	for _, mf := range mfs {
		if mf.GetName() != "ferry_received_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["source"] == "stripe" {
				created[l["outcome"]+"/"+l["reason"]] = true
			}
		}
	}
	raw, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	received := regexp.MustCompile(`ferry_received_total\{[^}]*outcome="([a-z_]+)",reason=~?"([a-z_|]+)"`)
	watched := received.FindAllStringSubmatch(string(raw), -1)
	if len(watched) == 0 {
		t.Fatal(`docs/alerts.yml watches no ferry_received_total{outcome="...",reason="..."}`)
	}
	for _, w := range watched {
		for _, reason := range strings.Split(w[2], "|") {
			if !created[w[1]+"/"+reason] {
				t.Errorf(`docs/alerts.yml watches ferry_received_total{outcome=%q,reason=%q}, which NewMetrics does not start at zero`, w[1], reason)
			}
		}
	}
}

// Every alert of docs/alerts.yml has a runbook annotation that links an
// entry of docs/operations.md (docs/operations.md#ANCHOR, the anchor GitHub
// gives the heading), so the person paged lands on what to run.
func TestAlertRunbooksLinkOperations(t *testing.T) {
	t.Parallel()
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(ops))
	raw, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`docs/operations\.md#([a-z0-9_-]+)`)
	runbooks := map[string]string{} // alert → its runbook annotation
	var alerts []string
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(line, "- alert: "); ok {
			alerts = append(alerts, name)
		} else if rb, ok := strings.CutPrefix(line, "runbook: "); ok && len(alerts) > 0 {
			runbooks[alerts[len(alerts)-1]] = rb
		}
	}
	if len(alerts) == 0 {
		t.Fatal("docs/alerts.yml has no alert")
	}
	for _, a := range alerts {
		m := link.FindStringSubmatch(runbooks[a])
		switch {
		case runbooks[a] == "":
			t.Errorf("%s has no runbook annotation", a)
		case m == nil:
			t.Errorf("%s's runbook links no section of docs/operations.md: %s", a, runbooks[a])
		case !anchors[m[1]]:
			t.Errorf("%s's runbook links docs/operations.md#%s, which no heading there has", a, m[1])
		}
	}
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, spaces to hyphens, other punctuation dropped, and a
// repeated one suffixed -1, -2, ...; headings in fenced code are none.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		text := strings.TrimLeft(line, "#")
		if fenced || len(text) == len(line) || len(line)-len(text) > 6 || !strings.HasPrefix(text, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// The rules' unit tests (testdata/alerts_test.yml) pass: each alert fires on
// its case and not on the case it once paged on by mistake. They need
// Prometheus's promtool (Debian: apt-get install prometheus; .ci/run
// installs it); without it the test skips, saying so, and fails under
// CI=true.
func TestAlertRulesUnit(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		const msg = "promtool is not installed (Debian: apt-get install prometheus): testdata/alerts_test.yml did not run"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	out, err := exec.CommandContext(t.Context(), promtool, "test", "rules", "testdata/alerts_test.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
