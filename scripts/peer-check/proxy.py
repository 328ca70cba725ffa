#!/usr/bin/env python3
"""Recording HTTP proxy for OpenAI-compatible servers (stdlib only), used by
scripts/peer-check/lm-eval to capture the exact request bodies each client sends.

Forwards every request to UPSTREAM and appends one JSON line per request to LOG:

    {"seq": 1, "ts": 1733300000.123, "label": "lm-eval", "method": "POST",
     "path": "/v1/completions", "body": {...request JSON...}, "status": 200,
     "response": {...response JSON...}, "elapsed_ms": 812}

A response with a Content-Length is logged before it is passed on, so once a client has
its last answer the log is complete. Streamed (chunked) responses are passed through chunk by
chunk and logged at the end, as the concatenated raw text. Logged responses are cut at 64 KiB.

Usage: proxy.py --upstream http://127.0.0.1:8712 --log FILE [--label NAME] [--listen 127.0.0.1:0]

Port 0 picks a free port; the chosen address is printed first, as
"proxy listening on http://HOST:PORT -> ..." (flushed), so scripts can read it.
"""
import argparse
import http.client
import http.server
import json
import socketserver
import threading
import time
import urllib.parse

MAX_RESPONSE_BYTES = 65536
UPSTREAM_TIMEOUT = 600.0
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "te", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
}


def parse_body(raw: bytes):
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


class Recorder:
    def __init__(self, path, label):
        self.path = path
        self.label = label
        self.lock = threading.Lock()
        self.seq = 0

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def write(self, record):
        line = json.dumps(record, ensure_ascii=False)
        with self.lock:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


def make_handler(upstream, recorder):
    up = urllib.parse.urlsplit(upstream)
    up_host, up_port = up.hostname, up.port or 80
    up_prefix = up.path.rstrip("/")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet
            pass

        def _proxy(self):
            t0 = time.time()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            record = {
                "seq": recorder.next_seq(),
                "ts": round(t0, 3),
                "label": recorder.label,
                "method": self.command,
                "path": self.path,
                "body": parse_body(raw),
            }
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            conn = http.client.HTTPConnection(up_host, up_port, timeout=UPSTREAM_TIMEOUT)
            captured = bytearray()
            logged = False

            def log():
                nonlocal logged
                if logged:
                    return
                logged = True
                record["elapsed_ms"] = int((time.time() - t0) * 1000)
                if captured:
                    record["response"] = parse_body(bytes(captured[:MAX_RESPONSE_BYTES]))
                    if len(captured) > MAX_RESPONSE_BYTES:
                        record["response_truncated"] = True
                recorder.write(record)

            try:
                conn.request(self.command, up_prefix + self.path, body=raw or None, headers=headers)
                resp = conn.getresponse()
                record["status"] = resp.status
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                clen = resp.getheader("Content-Length")
                if clen is not None:
                    body = resp.read()
                    captured += body
                    # logged before the client has the answer: once a client is done, so is its log
                    log()
                    self.send_header("Content-Length", clen)
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    # re-chunk whatever the upstream sends (SSE streams included)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while True:
                        chunk = resp.read1(65536)
                        if not chunk:
                            break
                        captured += chunk
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except Exception as e:  # upstream down, client gone, ...
                record["error"] = f"{type(e).__name__}: {e}"
                if "status" not in record:
                    try:
                        msg = json.dumps({"error": {"message": record["error"]}}).encode()
                        self.send_response(502)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(msg)))
                        self.end_headers()
                        self.wfile.write(msg)
                    except Exception:
                        pass
                self.close_connection = True
            finally:
                conn.close()
                log()

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _proxy

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0 = any free port)")
    ap.add_argument("--upstream", required=True, help="http://HOST:PORT of the server to forward to")
    ap.add_argument("--log", required=True, help="JSONL file to append to")
    ap.add_argument("--label", default="", help="free text stored in every record")
    args = ap.parse_args()

    host, _, port = args.listen.rpartition(":")
    srv = Server((host or "127.0.0.1", int(port)), make_handler(args.upstream, Recorder(args.log, args.label)))
    h, p = srv.server_address[:2]
    print(f"proxy listening on http://{h}:{p} -> {args.upstream}, logging to {args.log}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
