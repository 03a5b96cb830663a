package mappings

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// probe is a test plugin that records its lifecycle.
type probe struct {
	Key       string `yaml:"key"`
	FailAt    string `yaml:"failAt"`
	Count     int    `yaml:"count"`
	events    *[]string
	provision bool
}

func (p *probe) Match(key string) (Params, bool) { return Params{"k": key}, key == p.Key }
func (p *probe) Queue(Params) string             { return "" }
func (p *probe) Load(context.Context, Params) (json.RawMessage, error) {
	return json.RawMessage(`1`), nil
}
func (p *probe) Provision(Context) error {
	*p.events = append(*p.events, "provision "+p.Key)
	if p.FailAt == "provision" {
		return errors.New("provision failed")
	}
	return nil
}
func (p *probe) Validate() error {
	*p.events = append(*p.events, "validate "+p.Key)
	if p.FailAt == "validate" {
		return errors.New("validate failed")
	}
	return nil
}
func (p *probe) Cleanup() error {
	*p.events = append(*p.events, "cleanup "+p.Key)
	return nil
}

func probeRegistry(events *[]string) *Registry {
	r := NewRegistry()
	r.Register(Module{ID: "probe", New: func() Mapping { return &probe{events: events} }})
	return r
}

func TestLifecycle(t *testing.T) {
	var events []string
	r := probeRegistry(&events)
	set, err := r.Load(Context{Context: context.Background()}, []map[string]any{
		{"plugin": "probe", "key": "a", "count": 3},
		{"plugin": "probe", "key": "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	m, p, ok := set.Match("b")
	if !ok || p["k"] != "b" || m.(*probe).Key != "b" {
		t.Fatalf("Match(b) = %v %v %v", m, p, ok)
	}
	if m, _, _ := set.Match("a"); m.(*probe).Count != 3 {
		t.Errorf("count not decoded: %+v", m)
	}
	if _, _, ok := set.Match("c"); ok {
		t.Error("c matched")
	}
	if err := set.Cleanup(); err != nil {
		t.Fatal(err)
	}
	want := "provision a,validate a,provision b,validate b,cleanup a,cleanup b"
	if got := strings.Join(events, ","); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name   string
		cfg    []map[string]any
		msg    string
		events string
	}{
		{"no plugin", []map[string]any{{"key": "a"}}, "mappings[0].plugin: no plugin is named; use one of: probe", ""},
		{"unknown plugin", []map[string]any{{"plugin": "nope"}}, `mappings[0].plugin: "nope" is not a known mapping plugin; use one of: probe`, ""},
		{"unknown key", []map[string]any{{"plugin": "probe", "key": "a", "kye": "b"}},
			"mappings[0] (probe): kye is not a known key; remove it or fix its spelling (the plugin takes: plugin, count, failAt, key)", ""},
		{"bad type", []map[string]any{{"plugin": "probe", "count": "many"}}, "mappings[0] (probe): line 1: cannot unmarshal", ""},
		{"provision fails, earlier ones cleaned up", []map[string]any{{"plugin": "probe", "key": "a"}, {"plugin": "probe", "key": "b", "failAt": "provision"}},
			"mappings[1] (probe): provision failed", "provision a,validate a,provision b,cleanup b,cleanup a"},
		{"validate fails", []map[string]any{{"plugin": "probe", "key": "a", "failAt": "validate"}},
			"mappings[0] (probe): validate failed", "provision a,validate a,cleanup a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var events []string
			_, err := probeRegistry(&events).Load(Context{Context: context.Background()}, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want it to contain %q", err, tc.msg)
			}
			if got := strings.Join(events, ","); got != tc.events {
				t.Errorf("events %s, want %s", got, tc.events)
			}
		})
	}
}

func TestRegisterPanics(t *testing.T) {
	r := NewRegistry()
	r.Register(Module{ID: "x", New: func() Mapping { return &probe{} }})
	for name, m := range map[string]Module{
		"duplicate":  {ID: "x", New: func() Mapping { return &probe{} }},
		"empty id":   {ID: "", New: func() Mapping { return &probe{} }},
		"no new":     {ID: "y"},
		"not struct": {ID: "z", New: func() Mapping { return nil }},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			r.Register(m)
		})
	}
}

func TestPattern(t *testing.T) {
	p, err := ParsePattern("account:{branch}:{id}")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := p.Match("account:3:17")
	if !ok || got["branch"] != "3" || got["id"] != "17" {
		t.Fatalf("Match = %v %v", got, ok)
	}
	for _, miss := range []string{"account:3", "account:3:17:x", "account::1", "acc:3:1", "account:3/1:2"} {
		if _, ok := p.Match(miss); ok {
			t.Errorf("%q matched", miss)
		}
	}
	q, _ := ParsePattern("bank/{branch}")
	if s, err := q.Render(got); err != nil || s != "bank/3" {
		t.Errorf("Render = %q %v", s, err)
	}
	if _, err := q.Render(Params{}); err == nil {
		t.Error("Render without the parameter succeeded")
	}
	for _, bad := range []string{"", "a:{", "a:}", "a:{x}:{x}", "a:{1x}", "a:{x}{y}", "a:\x80{x}", "a:\ufffd{x}", "{x}\ufffd"} {
		if _, err := ParsePattern(bad); err == nil {
			t.Errorf("ParsePattern(%q) succeeded", bad)
		}
	}
}

// FuzzMatch checks that Match's scan answers what the pattern's regular
// expression answers, for any pattern that parses and any key.
func FuzzMatch(f *testing.F) {
	for _, c := range [][2]string{
		{"account:{branch}:{id}", "account:3:17"}, {"account:{branch}:{id}", "account:3/1:2"},
		{"account:{branch}:{id}", "account::1"}, {"bank/{branch}", "bank/3"}, {"a{x}b{y}", "a12b34b5"},
		{"{w}:x", "1:x"}, {"k:{a}", "k:\n\xff"}, {"k:{a}:", "k:1:"}, {"k:{a}/{b}", "k:1/2/3"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, pattern, key string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			return
		}
		got, ok := p.Match(key)
		want, wantOK := p.matchRE(key)
		if ok != wantOK || len(got) != len(want) {
			t.Fatalf("%q.Match(%q) = %v %v, the regular expression says %v %v", pattern, key, got, ok, want, wantOK)
		}
		for n, v := range want {
			if got[n] != v {
				t.Fatalf("%q.Match(%q) = %v, the regular expression says %v", pattern, key, got, want)
			}
		}
	})
}
