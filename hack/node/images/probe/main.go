// probe: the program of the e2e smoke tests' image (tests/test_e2e_node.py). One static binary, one command
// per test; everything it finds is printed to stdout, read back through the API server (pods/log).
//
//	probe echo WORDS...        print each word on a line of its own, exit 0
//	probe resolve NAME [S]     resolve NAME with the pod's /etc/resolv.conf (Go's own resolver), trying
//	                           for S seconds (default 10), print "resolved NAME <ip> [<ip>...]" (exit 1
//	                           when it does not resolve)
//	probe apiserver            GET /version and POST a SelfSubjectReview through the kubernetes Service
//	                           ($KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT) with the pod's
//	                           ServiceAccount token and CA; print "version <gitVersion>" and "user <name>"
//	probe alloc MIB            allocate and touch MIB MiB, 4 MiB at a time, printing the total every 16 MiB
//	probe wait-term FILE       print "waiting", then on SIGTERM write "SIGTERM pid=<pid>" to FILE, print
//	                           "got SIGTERM" and exit 0
//	probe ignore-term          print "ignoring SIGTERM" and sleep, SIGTERM ignored (as it is for a PID 1
//	                           without a handler: python's, sh's): only the kubelet's SIGKILL ends it
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func fail(format string, args ...any) {
	fmt.Printf("probe: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: probe echo|resolve|apiserver|alloc|wait-term ARGS")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "echo":
		for _, a := range args {
			fmt.Println(a)
		}
	case "resolve":
		resolve(args)
	case "apiserver":
		apiserver()
	case "alloc":
		alloc(args)
	case "wait-term":
		waitTerm(args)
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring SIGTERM")
		for {
			time.Sleep(time.Hour)
		}
	default:
		fail("unknown command %q", os.Args[1])
	}
}

func resolve(args []string) {
	if len(args) < 1 || len(args) > 2 {
		fail("usage: probe resolve NAME [SECONDS]")
	}
	seconds := 10
	if len(args) == 2 {
		var err error
		if seconds, err = strconv.Atoi(args[1]); err != nil {
			fail("resolve: %v", err)
		}
	}
	r := &net.Resolver{PreferGo: true}
	var addrs []string
	var err error
	// the Service's EndpointSlice may reach CoreDNS a moment after the pod starts: try again until the deadline
	for deadline := time.Now().Add(time.Duration(seconds) * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		addrs, err = r.LookupHost(ctx, args[0])
		cancel()
		if (err == nil && len(addrs) > 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		fail("resolve %s: %v", args[0], err)
	}
	fmt.Printf("resolved %s %s\n", args[0], strings.Join(addrs, " "))
}

func apiserver() {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		fail("KUBERNETES_SERVICE_HOST/PORT not set")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		fail("no ServiceAccount token: %v", err)
	}
	caPEM, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		fail("no ServiceAccount CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		fail("bad CA in %s/ca.crt", saDir)
	}
	// The serving certificate names kubernetes.default.svc: check it against that name, as client-go does
	// with the Service's address.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "kubernetes.default.svc"}}}
	base := "https://" + net.JoinHostPort(host, port)
	fmt.Printf("apiserver %s\n", base)
	do := func(method, path, body string) map[string]any {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			fail("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			fail("%s %s: HTTP %d: %s", method, path, resp.StatusCode, data)
		}
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil {
			fail("%s %s: %v", method, path, err)
		}
		return out
	}
	fmt.Printf("version %v\n", do("GET", "/version", "")["gitVersion"])
	review := do("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	status, _ := review["status"].(map[string]any)
	info, _ := status["userInfo"].(map[string]any)
	fmt.Printf("user %v\n", info["username"])
}

func alloc(args []string) {
	if len(args) != 1 {
		fail("usage: probe alloc MIB")
	}
	mib, err := strconv.Atoi(args[0])
	if err != nil {
		fail("alloc: %v", err)
	}
	var chunks [][]byte
	for total := 4; total <= mib; total += 4 {
		b := make([]byte, 4<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		chunks = append(chunks, b)
		if total%16 == 0 {
			fmt.Printf("allocated %d MiB\n", total)
		}
	}
	fmt.Printf("allocated all %d MiB (%d chunks)\n", mib, len(chunks))
}

func waitTerm(args []string) {
	if len(args) != 1 {
		fail("usage: probe wait-term FILE")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Println("waiting")
	<-sig
	if err := os.WriteFile(args[0], []byte(fmt.Sprintf("SIGTERM pid=%d\n", os.Getpid())), 0o644); err != nil {
		fail("write %s: %v", args[0], err)
	}
	fmt.Println("got SIGTERM")
}
