// Command helper is the test image of the sandbox suite: a static
// multi-call binary (the sandbox's images have no shell) that sleeps,
// serves HTTP, answers admission reviews, crashes, and inspects its
// container.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: helper COMMAND [ARGS]")
	}
	args := os.Args[2:]
	cmds := map[string]func([]string) error{
		"sleep": sleep, "serve": serve, "exit": exit, "cat": cat, "write": write, "rm": rm,
		"fstype": fstype, "id": id, "env": env, "resolve": resolve, "get": get, "terminate": terminate,
		"kube-get": kubeGet, "alloc": alloc, "deny": deny,
	}
	fn, ok := cmds[os.Args[1]]
	if !ok {
		fail("unknown command " + os.Args[1])
	}
	if err := fn(args); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "helper:", msg)
	os.Exit(1)
}

// sleep waits for SIGTERM and exits 0, printing what it got.
func sleep([]string) error {
	fmt.Println("sleeping")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Println("got", <-sig)
	return nil
}

// serve [PORT...] answers on each port (8080 if none): / with the hostname,
// /healthz with 200, and /ready with 503 while /tmp/unready exists. It stops
// when any port fails.
func serve(args []string) error {
	ports := args
	if len(ports) == 0 {
		ports = []string{"8080"}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		h, _ := os.Hostname()
		fmt.Fprintln(w, "hello from", h)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if _, err := os.Stat("/tmp/unready"); err == nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	failed := make(chan error, len(ports))
	for _, port := range ports {
		srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { failed <- srv.ListenAndServe() }()
	}
	fmt.Println("serving on", strings.Join(ports, " "))
	return <-failed
}

// exit CODE [MESSAGE] prints MESSAGE to stderr and exits with CODE.
func exit(args []string) error {
	code, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	if len(args) > 1 {
		fmt.Fprintln(os.Stderr, strings.Join(args[1:], " "))
	}
	os.Exit(code)
	return nil
}

// terminate MESSAGE writes the termination message and exits 0.
func terminate(args []string) error {
	path := os.Getenv("TERMINATION_PATH")
	if path == "" {
		path = "/dev/termination-log"
	}
	fmt.Println("writing termination message")
	return os.WriteFile(path, []byte(strings.Join(args, " ")), 0o644)
}

func cat(args []string) error {
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(data)
	return err
}

// write FILE CONTENT|--bytes N
func write(args []string) error {
	data := []byte(strings.Join(args[1:], " "))
	if len(args) == 3 && args[1] == "--bytes" {
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		data = make([]byte, n)
	}
	return os.WriteFile(args[0], data, 0o644)
}

func rm(args []string) error { return os.Remove(args[0]) }

func fstype(args []string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(args[0], &st); err != nil {
		return err
	}
	names := map[int64]string{0x01021994: "tmpfs", 0xEF53: "ext4", 0x794c7630: "overlay"}
	name, ok := names[st.Type]
	if !ok {
		name = fmt.Sprintf("0x%x", st.Type)
	}
	fmt.Println(name)
	return nil
}

func id([]string) error {
	groups, err := os.Getgroups()
	if err != nil {
		return err
	}
	wd, _ := os.Getwd()
	fmt.Printf("uid=%d gid=%d groups=%v cwd=%s\n", os.Getuid(), os.Getgid(), groups, wd)
	return nil
}

func env([]string) error {
	for _, kv := range os.Environ() {
		fmt.Println(kv)
	}
	return nil
}

func resolve(args []string) error {
	addrs, err := net.LookupHost(args[0])
	if err != nil {
		return err
	}
	fmt.Println(strings.Join(addrs, " "))
	return nil
}

// get URL fetches a URL with a 2 s timeout and prints the body.
func get(args []string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(args[0])
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	fmt.Print(string(buf[:n]))
	if resp.StatusCode >= 400 {
		return errors.New(resp.Status)
	}
	return nil
}

// kubeGet PATH calls the API server the way in-cluster clients do: the
// service-account token and CA, KUBERNETES_SERVICE_HOST and _PORT.
func kubeGet(args []string) error {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("no CA in ca.crt")
	}
	host := os.Getenv("KUBERNETES_SERVICE_HOST")
	port := os.Getenv("KUBERNETES_SERVICE_PORT")
	if len(args) > 1 {
		host, port = args[1], "443"
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(host, port)+args[0], nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(token))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
	if resp.StatusCode >= 400 {
		return errors.New(resp.Status)
	}
	return nil
}

// alloc MiB touches that much memory, says so, and sleeps like sleep.
func alloc(args []string) error {
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	held := make([][]byte, n)
	for i := range held {
		held[i] = make([]byte, 1<<20)
		for j := 0; j < len(held[i]); j += 4096 {
			held[i][j] = 1
		}
	}
	fmt.Printf("allocated %d MiB\n", n)
	err = sleep(nil)
	runtime.KeepAlive(held)
	return err
}

// deny PORT MESSAGE is an admission webhook that refuses every request with
// MESSAGE: it serves HTTPS on PORT with the PEM certificate and key in
// $TLS_CERT and $TLS_KEY, and answers each AdmissionReview (v1) on any
// path. It is the least a webhook can be that shows the API server called
// it.
func deny(args []string) error {
	cert, err := tls.X509KeyPair([]byte(os.Getenv("TLS_CERT")), []byte(os.Getenv("TLS_KEY")))
	if err != nil {
		return err
	}
	message := strings.Join(args[1:], " ")
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			Request struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"response": map[string]any{
				"uid": review.Request.UID, "allowed": false,
				"status": map[string]any{"code": http.StatusForbidden, "message": message},
			},
		})
	})
	srv := &http.Server{
		Addr: ":" + args[0], Handler: handler, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	fmt.Println("denying on", args[0])
	return srv.ListenAndServeTLS("", "")
}
