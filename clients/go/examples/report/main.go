// report sends key counts to Kafka through the Go Reporter: one "key count" pair per
// stdin line. The cross-language test (tests/interop) checks that every language's
// reporter puts a key on the same partition with the same total.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hotkeyd/hotkeyd/clients/go/reporter"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap servers")
	topic := flag.String("topic", "hotkeyd-accesses", "topic")
	flag.Parse()
	r, err := reporter.New(reporter.Options{Brokers: strings.Split(*brokers, ","), Topic: *topic})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		key, n, _ := strings.Cut(sc.Text(), " ")
		c, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			c = 1
		}
		r.Record(key, c)
	}
	_ = r.Close()
	out, _ := json.Marshal(r.Stats())
	fmt.Println(string(out))
}
