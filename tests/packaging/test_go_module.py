"""The Go module from ``dist/goproxy`` in a fresh module outside the repository.

The README's literal ``go get github.com/hotkeyd/hotkeyd/clients/go`` runs against a
``file://`` GOPROXY that ``make dist`` wrote (the proxy protocol's layout: list, .info,
.mod, .zip), so the same command works once the tag is pushed. The program then reads a
hot key through a real daemon; and it must not link a Kafka client (the Reporter is the
``reporter`` sub-package).

Cost: ~10 s (go from its module and build caches, the daemon's detection).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from .fresh import DIST, KEY, ROOT, hot_key_deployment, make_dist, need, result, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

MODULE = "github.com/hotkeyd/hotkeyd/clients/go"
APP = """package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
	"github.com/redis/go-redis/v9"
)

func main() {
	url, ns, key := os.Args[1], os.Args[2], os.Args[3]
	opt, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	cache := hotkeyd.NewHotCache(rdb, hotkeyd.CacheOptions{Namespace: hotkeyd.Namespace{Prefix: ns}})
	if err := cache.Start(ctx); err != nil {
		panic(err)
	}
	defer cache.Close()
	hot := func() bool { _, ok := cache.HotSet().Get(hotkeyd.Key{Bytes: key}); return ok }
	var value string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		if value, err = cache.Get(ctx, key); err != nil {
			panic(err)
		}
		if hot() && cache.Stats().Hits > 100 {
			break
		}
	}
	out, _ := json.Marshal(map[string]any{"hot": hot(), "value": value, "local": cache.Stats().Hits})
	fmt.Println(string(out))
}
"""


def _readme_go_get() -> list[str]:
    readme = (ROOT / "clients" / "go" / "README.md").read_text()
    m = re.search(r"^go get (\S+)$", readme, re.M)
    assert m, "clients/go/README.md has no go get line"
    return ["get", m.group(1)]


def test_go_get_through_a_file_proxy_and_read_a_hot_key(tmp_path: Path) -> None:
    go = need("go")
    make_dist("go")
    proxy = DIST / "goproxy"
    assert (proxy / MODULE / "@v" / "list").is_file()
    app = tmp_path / "app"
    app.mkdir()
    upstream = run([go, "env", "GOPROXY"], app).strip()
    env = {
        **os.environ,
        # ours from dist/, its dependencies from wherever go gets modules here
        "GOPROXY": f"{proxy.as_uri()},{upstream}",
        "GONOSUMDB": MODULE,  # not in the checksum database until it is published
        "GOFLAGS": "-mod=mod",
    }
    run([go, "mod", "init", "example.com/app"], app, env)
    run([go, *_readme_go_get()], app, env)  # the README's line, as is
    run([go, "get", "github.com/redis/go-redis/v9"], app, env)
    (app / "main.go").write_text(APP)
    deps = run([go, "list", "-deps", "."], app, env)
    assert MODULE in deps
    assert "franz-go" not in deps, "the cache must not link the Kafka client"
    run([go, "build", "-o", "app", "."], app, env)
    with hot_key_deployment(tmp_path) as dep:
        out = run([str(app / "app"), dep.redis_url, dep.namespace, KEY], app, timeout=90)
    result(out)
