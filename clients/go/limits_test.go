package hotkeyd

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestLimitsCopyIsTheSpec(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join("..", "..", "spec", "limits.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(spec, limitsJSON) {
		t.Fatal("limits.json differs from spec/limits.json: run go generate")
	}
}

// The limit vectors: hot-set cases through the same runner as hotset.json, and the
// signing key's minimum length.
func TestConformanceLimits(t *testing.T) {
	runHotSetVectors(t, "limits.json")
	var v struct {
		Auth []struct {
			Key   string `json:"key_utf8"`
			Error bool   `json:"error"`
		} `json:"auth"`
	}
	loadVectors(t, "limits.json", &v)
	if len(v.Auth) == 0 {
		t.Fatal("no auth limit vectors")
	}
	for _, c := range v.Auth {
		if _, err := NewMessageAuth([]byte(c.Key)); (err != nil) != c.Error {
			t.Errorf("key of %d bytes: err %v, want error %v", len(c.Key), err, c.Error)
		}
	}
}

// A limit is read from limits.json, not written down: a copy with a lower ttl_ms_max
// and message_entries_max makes the decoder refuse what the real file accepts.
func TestChangingALimitChangesTheDecoder(t *testing.T) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(limitsJSON))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	lims := doc["limits"].(map[string]any)
	lims["ttl_ms_max"].(map[string]any)["value"] = 1000
	lims["message_entries_max"].(map[string]any)["value"] = 2
	changed, _ := json.Marshal(doc)
	msg := []byte(`{"v":1,"instance":"d1","seq":1,"ts":1,"full":true,"final":false,` +
		`"hot":[{"key":"a","rate":1,"rule":"r","ttl_ms":1001}],"cool":[{"key":"b"},{"key":"c"}]}`)
	if _, skipped, err := DecodeMessage(msg); err != nil || skipped != 0 {
		t.Fatalf("spec limits: skipped %d, %v; want 0", skipped, err)
	}
	l, err := parseLimits(changed)
	if err != nil {
		t.Fatal(err)
	}
	l.apply()
	defer func() {
		orig, _ := parseLimits(limitsJSON)
		orig.apply()
	}()
	got, skipped, err := DecodeMessage(msg)
	if err != nil || skipped != 2 || len(got.Hot) != 0 || len(got.Cool) != 1 {
		t.Fatalf("changed limits: %+v skipped %d, %v; want the hot entry and one cool entry left out", got, skipped, err)
	}
	if NewHotSet(HotSetOptions{}).o.MaxTTL != maxTTL {
		t.Fatal("hot-set default not taken from the limits")
	}
}

func TestConformanceNamespace(t *testing.T) {
	var v struct {
		Cases []struct {
			Name, Prefix, Channel, Instance string
			Names                           map[string]string
		} `json:"cases"`
	}
	loadVectors(t, "namespace.json", &v)
	if len(v.Cases) == 0 {
		t.Fatal("no namespace vectors")
	}
	for _, c := range v.Cases {
		ns := Namespace{Prefix: c.Prefix, Channel: c.Channel}
		got := map[string]string{
			"events":     ns.EventsChannel(),
			"invalidate": ns.InvalidateChannel(),
			"demand":     ns.DemandChannel(c.Instance),
			"instances":  ns.Instances(),
			"snapshot":   ns.Snapshot(c.Instance),
		}
		for what, name := range got {
			if want := c.Names[what]; name != want {
				t.Errorf("%s: %s = %q, want %q", c.Name, what, name, want)
			}
		}
	}
}

// The hot-set runner goes through the subscriber's handler: a copy of the package whose
// handler no longer resyncs on a sequence gap fails it.
func TestConformanceRunnerUsesTheHandler(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a copy of the package")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "clients", "go")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec, _ := filepath.Abs(filepath.Join("..", "..", "spec"))
	if err := os.Symlink(spec, filepath.Join(root, "spec")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "lua"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("*")
	lua, _ := filepath.Glob(filepath.Join("lua", "*"))
	for _, f := range append(files, lua...) {
		if info, err := os.Stat(f); err != nil || info.IsDir() {
			continue
		}
		src, _ := os.ReadFile(f)
		if f == "subscriber.go" {
			broken := bytes.Replace(src, []byte("if res == Gap {\n\t\tatomic.AddInt64(&s.stats.Gaps, 1)"),
				[]byte("if false {\n\t\tatomic.AddInt64(&s.stats.Gaps, 1)"), 1)
			if bytes.Equal(broken, src) {
				t.Fatal("the handler's gap check is not where this test expects it")
			}
			src = broken
		}
		if err := os.WriteFile(filepath.Join(dir, f), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goBin, "test", "-count=1", "-vet=off", "-run", "^TestConformanceHotSet$", ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the runner passed with a broken handler:\n%s", out)
	}
	if !strings.Contains(string(out), `want "resynced"`) {
		t.Fatalf("the copy failed for another reason:\n%s", out)
	}
}
