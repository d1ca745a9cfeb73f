// realhost: a minimal Envoy-like host around proxy-wasm-cpp-host, the
// library Envoy embeds for Wasm, running on Wasmtime. It loads a plugin
// into one VM per worker (VMs of one vm_id share cpp-host's own shared data
// and queues, as Envoy's workers do) and serves the plugin's streams as a
// test or benchmark asks over stdin/stdout, one command a line. Nothing in
// it decides anything for the plugin: it supplies what Envoy supplies
// (headers, the properties the filter reads, local replies that run through
// the filter's own response callbacks, metrics, timers, a clock the driver
// steps) and reports what came out. The protocol is in README.md.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <time.h>
#include <unistd.h>

#include "include/proxy-wasm/context.h"
#include "include/proxy-wasm/pairs_util.h"
#include "include/proxy-wasm/wasm.h"
#include "include/proxy-wasm/wasmtime.h"

using namespace proxy_wasm;

namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

// ---- the driver's clock, log and metrics: one per process, as Envoy's
// stats store and time source are one per server ----

uint64_t g_now_ns = 0;
uint32_t g_log_level = 0; // what proxy_get_log_level answers (trace)
std::vector<std::string> g_logs;

struct Metric {
  uint32_t type;
  uint64_t value;
};
std::vector<Metric> g_metrics; // indexed by id - 1
std::unordered_map<std::string, uint32_t> g_metric_ids;

// ---- HTTP callouts: the clusters the driver serves, the calls the
// plugin made that the driver has not answered yet, and the reply of the
// one being delivered ----

std::set<std::string> g_clusters;
struct Callout {
  uint32_t token;
  ContextBase *root;
  std::string cluster, body;
  std::vector<std::pair<std::string, std::string>> headers;
  int timeout_ms;
};
std::vector<Callout> g_callouts_new;               // not yet listed to the driver
std::map<uint32_t, Callout> g_callouts_out;        // listed, not yet answered
uint32_t g_next_token = 1;
std::vector<std::pair<std::string, std::string>> g_call_headers; // during onHttpCallResponse
std::string g_call_body;

// ---- the line protocol: space-separated tokens, each "=" followed by its
// bytes with '%', space, controls and non-ASCII as %XX ----

std::string esc(std::string_view s) {
  static const char *hex = "0123456789ABCDEF";
  std::string out = "=";
  for (unsigned char c : s) {
    if (c <= 0x20 || c >= 0x7f || c == '%') {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int unhex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return 0;
}

std::string unesc(std::string_view t) {
  std::string out;
  for (size_t i = 1; i < t.size(); i++) { // t[0] is '='
    if (t[i] == '%' && i + 2 < t.size()) {
      out += static_cast<char>(unhex(t[i + 1]) << 4 | unhex(t[i + 2]));
      i += 2;
    } else {
      out += t[i];
    }
  }
  return out;
}

struct Tokens {
  std::vector<std::string> t;
  size_t i = 0;
  explicit Tokens(const std::string &line) {
    size_t start = 0;
    while (start < line.size()) {
      size_t end = line.find(' ', start);
      if (end == std::string::npos) end = line.size();
      if (end > start) t.push_back(line.substr(start, end - start));
      start = end + 1;
    }
  }
  std::string word() { return i < t.size() ? t[i++] : ""; }
  std::string str() { return i < t.size() ? unesc(t[i++]) : ""; }
  uint64_t num() { return i < t.size() ? std::stoull(t[i++]) : 0; }
  Headers pairs() {
    Headers h;
    for (uint64_t n = num(); n > 0; n--) {
      std::string k = str();
      h.emplace_back(k, str());
    }
    return h;
  }
  std::vector<std::string> list() {
    std::vector<std::string> v;
    for (uint64_t n = num(); n > 0; n--) v.push_back(str());
    return v;
  }
};

std::string encPairs(const Headers &h) {
  std::string out = std::to_string(h.size());
  for (auto &[k, v] : h) out += " " + esc(k) + " " + esc(v);
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// ---- streams ----

struct LocalReply {
  uint32_t status;
  std::string body, details;
  Headers headers;
};

class HostContext;

struct Stream {
  uint64_t id;
  int worker;
  HostContext *ctx = nullptr;
  Headers req, resp;
  std::string peer, cluster, route;
  // Properties by their \0-separated path: the dynamic metadata the driver
  // sent and what the plugin set with proxy_set_property.
  std::map<std::string, std::string> props;
  // What the plugin set with proxy_set_property, by the filter state name
  // Envoy gives it: "wasm." and the path.
  Headers filter_state;
  std::optional<LocalReply> local;
  bool has_response = false, is_local = false;
  bool parked = false;
  bool resume = false; // proxy_continue_stream arrived
  bool reset = false;  // proxy_close_stream / a failed VM
  std::string details;
  std::string body;     // response body the body callback sees
  std::string out_body; // response body passed downstream
};

// A response body the plugin reads (and may replace) during
// proxy_on_response_body.
class BodyBuffer : public BufferInterface {
public:
  explicit BodyBuffer(std::string *s) : s_(s) {}
  size_t size() const override { return s_->size(); }
  WasmResult copyTo(WasmBase *wasm, size_t start, size_t length, uint64_t ptr_ptr,
                    uint64_t size_ptr) const override {
    if (start > s_->size()) return WasmResult::BadArgument;
    if (!wasm->copyToPointerSize(std::string_view(*s_).substr(start, length), ptr_ptr, size_ptr))
      return WasmResult::InvalidMemoryAccess;
    return WasmResult::Ok;
  }
  WasmResult copyFrom(size_t start, size_t length, std::string_view data) override {
    if (start > s_->size()) return WasmResult::BadArgument;
    s_->replace(start, length, data);
    return WasmResult::Ok;
  }

private:
  std::string *s_;
};

std::string int64Bytes(int64_t n) {
  std::string b(8, '\0');
  std::memcpy(b.data(), &n, 8); // x86-64 is little-endian, as Envoy encodes
  return b;
}

std::optional<std::string> headerValue(const Headers &h, std::string_view key) {
  for (auto &[k, v] : h)
    if (k == key) return v;
  return std::nullopt;
}

std::string marshal(const Headers &h) {
  Pairs p;
  for (auto &[k, v] : h) p.emplace_back(k, v);
  std::string out(PairsUtil::pairsSize(p), '\0');
  PairsUtil::marshalPairs(p, out.data(), out.size());
  return out;
}

class HostWasm;

class HostContext : public ContextBase {
public:
  using ContextBase::ContextBase;
  Stream *stream = nullptr;

  void error(std::string_view message) override {
    std::cerr << "realhost: " << message << "\n";
    g_logs.push_back("error " + std::string(message));
  }

  WasmResult log(uint32_t level, std::string_view message) override {
    if (level >= g_log_level) g_logs.push_back(std::to_string(level) + " " + std::string(message));
    return WasmResult::Ok;
  }
  uint32_t getLogLevel() override { return g_log_level; }
  uint64_t getCurrentTimeNanoseconds() override { return g_now_ns; }
  uint64_t getMonotonicTimeNanoseconds() override { return g_now_ns; }
  std::string_view getConfiguration() override;
  std::pair<uint32_t, std::string_view> getStatus() override { return {0, ""}; }

  BufferInterface *getBuffer(WasmBufferType type) override;
  bool endOfStream(WasmStreamType) override { return true; }

  // A callout to a cluster the driver serves waits for its answer ("calls",
  // then "reply" or "fail"), delivered to this root context as Envoy's
  // async client delivers it; one to any other cluster fails as Envoy's
  // does for an unknown cluster. As in Envoy, :method, :path and
  // :authority are required.
  WasmResult httpCall(std::string_view cluster, const Pairs &headers, std::string_view body,
                      const Pairs &, int timeout_ms, uint32_t *token) override {
    if (!g_clusters.count(std::string(cluster))) return WasmResult::BadArgument;
    Callout c{g_next_token++, this, std::string(cluster), std::string(body), {}, timeout_ms};
    bool method = false, path = false, authority = false;
    for (auto &[k, v] : headers) {
      method |= k == ":method";
      path |= k == ":path";
      authority |= k == ":authority";
      c.headers.emplace_back(std::string(k), std::string(v));
    }
    if (!method || !path || !authority) return WasmResult::BadArgument;
    *token = c.token;
    g_callouts_new.push_back(std::move(c));
    return WasmResult::Ok;
  }

  WasmResult defineMetric(uint32_t type, std::string_view name, uint32_t *id) override {
    auto [it, added] = g_metric_ids.try_emplace(std::string(name), g_metrics.size() + 1);
    if (added) g_metrics.push_back({type, 0});
    *id = it->second;
    return WasmResult::Ok;
  }
  Metric *metric(uint32_t id) { return id == 0 || id > g_metrics.size() ? nullptr : &g_metrics[id - 1]; }
  WasmResult incrementMetric(uint32_t id, int64_t offset) override {
    auto *m = metric(id);
    if (!m) return WasmResult::NotFound;
    m->value += static_cast<uint64_t>(offset);
    return WasmResult::Ok;
  }
  WasmResult recordMetric(uint32_t id, uint64_t value) override {
    auto *m = metric(id);
    if (!m) return WasmResult::NotFound;
    m->value = value;
    return WasmResult::Ok;
  }
  WasmResult getMetric(uint32_t id, uint64_t *value) override {
    auto *m = metric(id);
    if (!m) return WasmResult::NotFound;
    *value = m->value;
    return WasmResult::Ok;
  }

  WasmResult getProperty(std::string_view path, std::string *result) override;
  WasmResult setProperty(std::string_view key, std::string_view value) override {
    if (!stream) return WasmResult::NotFound;
    stream->props[std::string(key)] = std::string(value);
    std::string name = "wasm." + std::string(key);
    for (auto &kv : stream->filter_state) {
      if (kv.first == name) {
        kv.second = std::string(value);
        return WasmResult::Ok;
      }
    }
    stream->filter_state.emplace_back(name, std::string(value));
    return WasmResult::Ok;
  }

  WasmResult continueStream(WasmStreamType) override {
    if (stream) stream->resume = true;
    return WasmResult::Ok;
  }
  WasmResult closeStream(WasmStreamType) override {
    if (stream) stream->reset = true;
    return WasmResult::Ok;
  }
  // Envoy defers the reply until the callback returns; so does the driver.
  WasmResult sendLocalResponse(uint32_t code, std::string_view body, Pairs headers, GrpcStatusCode,
                               std::string_view details) override {
    if (!stream) return WasmResult::NotFound;
    LocalReply r{code, std::string(body), std::string(details), {}};
    for (auto &[k, v] : headers) r.headers.emplace_back(std::string(k), std::string(v));
    stream->local = std::move(r);
    return WasmResult::Ok;
  }
  void clearRouteCache() override {}

  Headers *map(WasmHeaderMapType type) {
    if (type == WasmHeaderMapType::HttpCallResponseHeaders) return &g_call_headers;
    if (!stream) return nullptr;
    switch (type) {
    case WasmHeaderMapType::RequestHeaders:
      return &stream->req;
    case WasmHeaderMapType::ResponseHeaders:
      return stream->has_response ? &stream->resp : nullptr;
    default:
      return nullptr;
    }
  }
  WasmResult addHeaderMapValue(WasmHeaderMapType type, std::string_view key,
                               std::string_view value) override {
    auto *h = map(type);
    if (!h) return WasmResult::BadArgument;
    h->emplace_back(lower(key), std::string(value));
    return WasmResult::Ok;
  }
  WasmResult getHeaderMapValue(WasmHeaderMapType type, std::string_view key,
                               std::string_view *result) override {
    auto *h = map(type);
    if (!h) return WasmResult::BadArgument;
    for (auto &[k, v] : *h)
      if (k == key) {
        *result = v;
        return WasmResult::Ok;
      }
    return WasmResult::NotFound;
  }
  WasmResult getHeaderMapPairs(WasmHeaderMapType type, Pairs *result) override {
    auto *h = map(type);
    if (!h) return WasmResult::BadArgument;
    for (auto &[k, v] : *h) result->emplace_back(k, v);
    return WasmResult::Ok;
  }
  WasmResult setHeaderMapPairs(WasmHeaderMapType type, const Pairs &pairs) override {
    auto *h = map(type);
    if (!h) return WasmResult::BadArgument;
    h->clear();
    for (auto &[k, v] : pairs) h->emplace_back(lower(k), std::string(v));
    return WasmResult::Ok;
  }
  WasmResult removeHeaderMapValue(WasmHeaderMapType type, std::string_view key) override {
    auto *h = map(type);
    if (!h) return WasmResult::BadArgument;
    std::string k = lower(key);
    std::erase_if(*h, [&](auto &kv) { return kv.first == k; });
    return WasmResult::Ok;
  }
  // Envoy's setCopy: the first value is replaced and the others dropped;
  // an absent header is added.
  WasmResult replaceHeaderMapValue(WasmHeaderMapType type, std::string_view key,
                                   std::string_view value) override {
    auto *h = map(type);
    if (!h) return WasmResult::BadArgument;
    std::string k = lower(key);
    bool seen = false;
    std::erase_if(*h, [&](auto &kv) {
      if (kv.first != k) return false;
      if (!seen) {
        kv.second = std::string(value);
        seen = true;
        return false;
      }
      return true;
    });
    if (!seen) h->emplace_back(k, std::string(value));
    return WasmResult::Ok;
  }
  WasmResult getHeaderMapSize(WasmHeaderMapType type, uint32_t *result) override {
    auto *h = map(type);
    if (!h) return WasmResult::BadArgument;
    *result = marshal(*h).size();
    return WasmResult::Ok;
  }

private:
  BodyBuffer body_{nullptr};
  BufferBase config_;
};

class HostWasm : public WasmBase {
public:
  using WasmBase::WasmBase;
  bool timer = false;
  ContextBase *createVmContext() override { return new HostContext(this); }
  ContextBase *createRootContext(const std::shared_ptr<PluginBase> &plugin) override {
    return new HostContext(this, plugin);
  }
  ContextBase *createContext(const std::shared_ptr<PluginBase> &plugin) override {
    return new HostContext(this, plugin);
  }
  void setTimerPeriod(uint32_t root_context_id, std::chrono::milliseconds period) override {
    timer = period.count() > 0;
    WasmBase::setTimerPeriod(root_context_id, period);
  }
  // Shared queues deliver on the calling thread: the driver has one.
  CallOnThreadFunction callOnThreadFunction() override {
    return [](const std::function<void()> &f) { f(); };
  }
  void error(std::string_view message) override {
    std::cerr << "realhost: " << message << "\n";
    g_logs.push_back("error " + std::string(message));
  }
  // allocCost returns the CPU ns of n calls of cpp-host's allocMemory,
  // which every hostcall returning data makes (the guest's allocator
  // bracketed by two restricted-callback settings), and of n bare calls
  // of the guest's allocator.
  std::pair<uint64_t, uint64_t> allocCost(uint64_t n, ContextBase *root);
};

std::string g_plugin_config;

std::string_view HostContext::getConfiguration() { return g_plugin_config; }

BufferInterface *HostContext::getBuffer(WasmBufferType type) {
  switch (type) {
  case WasmBufferType::PluginConfiguration:
    return config_.set(g_plugin_config);
  case WasmBufferType::VmConfiguration:
    return config_.set("");
  case WasmBufferType::HttpResponseBody:
    if (!stream) return nullptr;
    body_ = BodyBuffer(&stream->body);
    return &body_;
  case WasmBufferType::HttpCallResponseBody:
    body_ = BodyBuffer(&g_call_body);
    return &body_;
  default:
    return nullptr;
  }
}

// The attributes Sluice reads, with Envoy's encodings: strings raw,
// integers 8-byte little-endian, maps as proxy-wasm pairs.
WasmResult HostContext::getProperty(std::string_view path, std::string *result) {
  if (path == "plugin_name" || path == "plugin_root_id" || path == "plugin_vm_id") {
    auto &p = plugin_ ? plugin_ : temp_plugin_;
    if (!p) return WasmResult::NotFound;
    *result = path == "plugin_name" ? p->name_ : path == "plugin_root_id" ? p->root_id_ : p->vm_id_;
    return WasmResult::Ok;
  }
  if (!stream) return WasmResult::NotFound;
  Stream &s = *stream;
  if (auto it = s.props.find(std::string(path)); it != s.props.end()) {
    *result = it->second;
    return WasmResult::Ok;
  }
  std::string p(path);
  for (auto &c : p)
    if (c == '\0') c = '.';
  auto fromHeader = [&](std::string_view key) {
    auto v = headerValue(s.req, key);
    if (!v) return WasmResult::NotFound;
    *result = *v;
    return WasmResult::Ok;
  };
  if (p == "source.address") return *result = s.peer, WasmResult::Ok;
  if (p == "destination.address") return *result = "127.0.0.1:10000", WasmResult::Ok;
  if (p == "request.path") return fromHeader(":path");
  if (p == "request.url_path") {
    auto r = fromHeader(":path");
    if (auto q = result->find('?'); r == WasmResult::Ok && q != std::string::npos) result->resize(q);
    return r;
  }
  if (p == "request.method") return fromHeader(":method");
  if (p == "request.host") return fromHeader(":authority");
  if (p == "request.scheme") return fromHeader(":scheme");
  if (p == "request.id") return fromHeader("x-request-id");
  if (p == "request.protocol") return *result = "HTTP/1.1", WasmResult::Ok;
  if (p == "request.headers") return *result = marshal(s.req), WasmResult::Ok;
  if (p == "xds.cluster_name") return *result = s.cluster, WasmResult::Ok;
  if (p == "xds.route_name") return *result = s.route, WasmResult::Ok;
  if (!s.has_response) return WasmResult::NotFound;
  if (p == "response.headers") return *result = marshal(s.resp), WasmResult::Ok;
  if (p == "response.code") {
    auto v = headerValue(s.resp, ":status");
    *result = int64Bytes(v ? std::atoll(v->c_str()) : 0);
    return WasmResult::Ok;
  }
  if (p == "response.code_details" && !s.details.empty()) return *result = s.details, WasmResult::Ok;
  return WasmResult::NotFound;
}

bool g_tracing = false;
std::map<std::string, uint64_t> g_trace_counts;

struct Integration : WasmVmIntegration {
  WasmVmIntegration *clone() override { return new Integration(); }
  // Envoy's default, info: cpp-host builds no per-call trace strings;
  // trace only while profile counts calls.
  LogLevel getLogLevel() override { return g_tracing ? LogLevel::trace : LogLevel::info; }
  void error(std::string_view message) override {
    std::cerr << "realhost vm: " << message << "\n";
    g_logs.push_back("error " + std::string(message));
  }
  void trace(std::string_view message) override {
    for (auto [prefix, kind] : {std::pair{"[vm->host] ", "host "}, std::pair{"[host->vm] ", "guest "}}) {
      if (message.starts_with(prefix)) {
        message.remove_prefix(std::strlen(prefix));
        g_trace_counts[kind + std::string(message.substr(0, message.find('(')))]++;
      }
    }
  }
  bool getNullVmFunction(std::string_view, bool, int, NullPlugin *, void *) override { return false; }
};

std::unique_ptr<WasmVm> newVm() {
  auto vm = createWasmtimeVm();
  vm->integration().reset(new Integration());
  return vm;
}

// ---- workers and the stream lifecycle ----

struct Worker {
  std::shared_ptr<WasmHandleBase> wasm;
  std::shared_ptr<PluginHandleBase> plugin;
  ContextBase *root = nullptr;
  HostWasm *host() { return static_cast<HostWasm *>(wasm->wasm().get()); }
};

std::shared_ptr<WasmHandleBase> g_base;
std::shared_ptr<PluginBase> g_plugin;
std::vector<Worker> g_workers;
std::map<uint64_t, std::unique_ptr<Stream>> g_streams;
uint64_t g_next_stream = 1;

std::shared_ptr<WasmHandleBase> cloneWasm(std::shared_ptr<WasmHandleBase> base) {
  auto wasm = std::make_shared<HostWasm>(base, newVm);
  return std::make_shared<WasmHandleBase>(wasm);
}

bool readFile(const std::string &path, std::string *out) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out->append(buf, n);
  std::fclose(f);
  return true;
}

// writeFile replaces path whole, through a rename, so that a host reading
// it concurrently sees the old file or the new one.
void writeFile(const std::string &path, const std::string &data) {
  std::string tmp = path + ".tmp" + std::to_string(getpid());
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) return;
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = std::fclose(f) == 0 && ok;
  if (ok) std::rename(tmp.c_str(), path.c_str());
  else std::remove(tmp.c_str());
}

std::string loadPlugin(const std::string &code, const std::string &vm_id, int workers,
                       bool precompiled) {
  g_plugin = std::make_shared<PluginBase>("sluice", vm_id, vm_id, "wasmtime", g_plugin_config,
                                          /*fail_open=*/false, "");
  std::string key = makeVmKey(vm_id, "", code);
  g_base = createWasm(
      key, code, g_plugin,
      [&](std::string_view) -> std::shared_ptr<WasmHandleBase> {
        auto wasm = std::make_shared<HostWasm>(newVm(), vm_id, "", key,
                                               std::unordered_map<std::string, std::string>{},
                                               AllowedCapabilitiesMap{});
        return std::make_shared<WasmHandleBase>(wasm);
      },
      cloneWasm, precompiled);
  if (!g_base) return "the base VM did not load or initialize";
  for (int i = 0; i < workers; i++) {
    Worker w;
    w.wasm = cloneWasm(g_base);
    if (!w.wasm->wasm()->initialize()) return "worker " + std::to_string(i) + " did not initialize";
    w.root = w.wasm->wasm()->start(g_plugin);
    if (!w.root) return "worker " + std::to_string(i) + " did not start";
    if (!w.wasm->wasm()->configure(w.root, g_plugin))
      return "worker " + std::to_string(i) + " rejected its configuration";
    w.plugin = std::make_shared<PluginHandleBase>(w.wasm, g_plugin);
    g_workers.push_back(std::move(w));
  }
  return "";
}

Stream *newStream(int worker, Headers req) {
  auto s = std::make_unique<Stream>();
  s->id = g_next_stream++;
  s->worker = worker;
  s->req = std::move(req);
  for (auto &kv : s->req) kv.first = lower(kv.first);
  Worker &w = g_workers[worker];
  s->ctx = new HostContext(w.wasm->wasm().get(), w.root->id(), w.plugin);
  s->ctx->stream = s.get();
  s->ctx->onCreate();
  Stream *p = s.get();
  g_streams[p->id] = std::move(s);
  return p;
}

// finish runs the stream's last callbacks, in our host's order.
void finish(Stream &s) {
  s.ctx->onLog();
  s.ctx->onDone();
  s.ctx->onDelete();
  delete s.ctx;
  s.ctx = nullptr;
}

void takeLocal(Stream &s, Headers &headers, std::string &body) {
  LocalReply r = std::move(*s.local);
  s.local.reset();
  headers = {{":status", std::to_string(r.status)}};
  for (auto &[k, v] : r.headers) headers.emplace_back(lower(k), v);
  body = r.body;
  s.details = r.details;
  s.is_local = true;
}

// respond runs the response callbacks on headers and body chunks; a local
// reply sent from them replaces the response without running them again.
void respond(Stream &s, Headers headers, const std::vector<std::string> &chunks) {
  s.has_response = true;
  s.resp = std::move(headers);
  s.body.clear();
  s.out_body.clear();
  auto replaced = [&] {
    if (!s.local) return false;
    Headers h;
    takeLocal(s, h, s.out_body);
    s.resp = std::move(h);
    return true;
  };
  s.ctx->onResponseHeaders(s.resp.size(), chunks.empty());
  if (replaced()) return;
  for (size_t i = 0; i < chunks.size(); i++) {
    bool last = i + 1 == chunks.size();
    s.body += chunks[i];
    auto act = s.ctx->onResponseBody(s.body.size(), last);
    if (replaced()) return;
    if (act == FilterDataStatus::Continue || last) {
      s.out_body += s.body;
      s.body.clear();
    }
  }
}

// sendLocal turns the deferred local reply into the response, prepared as
// Envoy prepares it: the plugin's headers first, then content-length and,
// if missing, content-type text/plain for a body.
void sendLocal(Stream &s) {
  Headers h;
  std::string body;
  takeLocal(s, h, body);
  if (!body.empty()) {
    bool typed = headerValue(h, "content-type").has_value();
    h.emplace_back("content-length", std::to_string(body.size()));
    if (!typed) h.emplace_back("content-type", "text/plain");
  }
  std::vector<std::string> chunks;
  if (!body.empty()) chunks.push_back(body);
  s.is_local = true;
  respond(s, std::move(h), chunks);
  s.is_local = true;
}

std::string doneLine(Stream &s) {
  std::string line = "done " + std::to_string(s.id) + " " +
                     std::to_string(std::atoi(headerValue(s.resp, ":status").value_or("0").c_str())) +
                     " " + (s.is_local ? "1" : "0") + " " + encPairs(s.resp) + " " + esc(s.out_body) +
                     " " + encPairs(s.filter_state);
  finish(s);
  g_streams.erase(s.id);
  return line;
}

// decide reports where the request stands after a request callback or a
// tick: answered locally (done), held by the plugin (parked), or at the
// upstream (reached, with the headers the upstream receives).
std::string decide(Stream &s, bool paused) {
  if (s.reset) {
    std::string line = "reset " + std::to_string(s.id);
    finish(s);
    g_streams.erase(s.id);
    return line;
  }
  if (s.local) {
    sendLocal(s);
    return doneLine(s);
  }
  if (paused && !s.resume) {
    s.parked = true;
    return "parked " + std::to_string(s.id);
  }
  s.resume = false;
  s.parked = false;
  return "reached " + std::to_string(s.id) + " " + encPairs(s.req);
}

std::string start(Tokens &in) {
  int worker = in.num();
  Headers req = in.pairs();
  std::string peer = in.str(), cluster = in.str(), route = in.str();
  Headers props = in.pairs();
  if (worker < 0 || worker >= static_cast<int>(g_workers.size())) return "err no such worker";
  Stream *s = newStream(worker, std::move(req));
  s->peer = peer;
  s->cluster = cluster;
  s->route = route;
  for (auto &[k, v] : props) s->props[k] = v;
  auto act = s->ctx->onRequestHeaders(s->req.size(), true);
  return decide(*s, act != FilterHeadersStatus::Continue);
}

Stream *find(Tokens &in) {
  auto it = g_streams.find(in.num());
  return it == g_streams.end() ? nullptr : it->second.get();
}

std::string upstreamAnswer(Tokens &in) {
  Stream *s = find(in);
  if (!s) return "err no such stream";
  uint64_t status = in.num();
  Headers h{{":status", std::to_string(status)}};
  for (auto &kv : in.pairs()) h.emplace_back(lower(kv.first), kv.second);
  respond(*s, std::move(h), in.list());
  return doneLine(*s);
}

// lifecycles runs n whole lifecycles of one request on one worker, the
// upstream answering 200 with no body, and returns how many requests the
// plugin did not pass to the upstream. The clock moves by step before each
// request, or, with step 0, reads the real clock as Envoy's does.
uint64_t lifecycles(Tokens &in) {
  int worker = in.num();
  uint64_t n = in.num(), step = in.num();
  Headers req = in.pairs();
  std::string peer = in.str(), cluster = in.str(), route = in.str();
  const Headers upstream{{":status", "200"}, {"content-type", "text/plain"}};
  const std::vector<std::string> none;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; i++) {
    g_now_ns = step ? g_now_ns + step
                    : std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    Stream *s = newStream(worker, req);
    s->peer = peer;
    s->cluster = cluster;
    s->route = route;
    auto act = s->ctx->onRequestHeaders(s->req.size(), true);
    if (s->local || act != FilterHeadersStatus::Continue) {
      bad++;
      if (s->local) sendLocal(*s);
    } else {
      respond(*s, upstream, none);
    }
    finish(*s);
    g_streams.erase(s->id);
  }
  return bad;
}

uint64_t threadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::pair<uint64_t, uint64_t> HostWasm::allocCost(uint64_t n, ContextBase *root) {
  // In batches, with a tick between them untimed: a guest may recycle
  // what it handed out only when the host next calls it (Sluice's bridge
  // starts its arena over then), as it does between hostcalls in a stream.
  constexpr uint64_t batch = 256;
  uint64_t addr, full = 0, bare = 0;
  for (uint64_t done = 0; done < n; done += batch) {
    uint64_t t0 = threadCpuNs();
    for (uint64_t i = 0; i < batch; i++) allocMemory(16, &addr);
    full += threadCpuNs() - t0;
    root->onTick(0);
    t0 = threadCpuNs();
    for (uint64_t i = 0; i < batch; i++) malloc_(vm_context(), 16);
    bare += threadCpuNs() - t0;
    root->onTick(0);
  }
  return {full, bare};
}

// bench times lifecycles inside this process: wall time, and the thread's
// CPU time, which on a shared machine leaves out the time other processes
// held the core (the guest runs on this thread).
std::string bench(Tokens &in) {
  auto t0 = std::chrono::steady_clock::now();
  uint64_t cpu0 = threadCpuNs();
  uint64_t bad = lifecycles(in);
  uint64_t cpu = threadCpuNs() - cpu0;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  return "bench " + std::to_string(ns.count()) + " " + std::to_string(bad) + " " + std::to_string(cpu);
}

// profile runs lifecycles with cpp-host's trace on and counts, from its
// trace lines, the calls each way: hostcalls the guest made ("host NAME")
// and calls into the guest, its allocator included ("guest NAME").
std::string profile(Tokens &in) {
  g_trace_counts.clear();
  g_tracing = true;
  uint64_t bad = lifecycles(in);
  g_tracing = false;
  std::string out = "profile " + std::to_string(bad) + " " + std::to_string(g_trace_counts.size());
  for (auto &[k, v] : g_trace_counts) out += " " + esc(k) + " " + std::to_string(v);
  return out;
}

std::string handle(const std::string &line) {
  Tokens in(line);
  std::string cmd = in.word();
  if (cmd == "plugin") {
    std::string path = in.str(), vm_id = in.str();
    int workers = in.num();
    g_plugin_config = in.str();
    g_log_level = in.num();
    // cache, if given, holds the module with Wasmtime's compiled code in
    // cpp-host's precompiled section: compiling Sluice takes seconds, and
    // a test starts a host per case.
    std::string cache = in.str();
    std::string code;
    bool precompiled = !cache.empty() && readFile(cache, &code);
    if (!precompiled && !readFile(path, &code)) return "err cannot read " + esc(path);
    std::string err = loadPlugin(code, vm_id, workers, precompiled);
    if (!err.empty()) return "err " + esc(err);
    if (!cache.empty() && !precompiled) {
      auto serialized = g_base->wasm()->wasm_vm()->serialize(code);
      if (serialized) writeFile(cache, *serialized);
    }
    return "ok";
  }
  if (cmd == "clock") {
    g_now_ns = in.num();
    return "ok";
  }
  if (cmd == "start") return start(in);
  if (cmd == "poll") {
    Stream *s = find(in);
    if (!s) return "err no such stream";
    return decide(*s, s->parked);
  }
  if (cmd == "answer") return upstreamAnswer(in);
  if (cmd == "cluster") {
    g_clusters.insert(in.str());
    return "ok";
  }
  if (cmd == "calls") {
    // The calls made since the last listing: token, cluster, headers,
    // body and timeout each.
    std::string out = "calls " + std::to_string(g_callouts_new.size());
    for (auto &c : g_callouts_new) {
      out += " " + std::to_string(c.token) + " " + esc(c.cluster) + " " + encPairs(c.headers) + " " + esc(c.body) +
             " " + std::to_string(c.timeout_ms);
      g_callouts_out[c.token] = std::move(c);
    }
    g_callouts_new.clear();
    return out;
  }
  if (cmd == "reply" || cmd == "fail") {
    // reply TOKEN STATUS HEADERS BODY: the cluster answered; fail TOKEN:
    // no response (a reset, a timeout), which Envoy reports with no
    // headers and no body.
    auto it = g_callouts_out.find(static_cast<uint32_t>(in.num()));
    if (it == g_callouts_out.end()) return "err no such call";
    Callout c = std::move(it->second);
    g_callouts_out.erase(it);
    g_call_headers.clear();
    g_call_body.clear();
    if (cmd == "reply") {
      g_call_headers.emplace_back(":status", std::to_string(in.num()));
      for (auto &kv : in.pairs()) g_call_headers.emplace_back(lower(kv.first), kv.second);
      g_call_body = in.str();
    }
    c.root->onHttpCallResponse(c.token, g_call_headers.size(), g_call_body.size(), 0);
    g_call_headers.clear();
    g_call_body.clear();
    return "ok";
  }
  if (cmd == "tick") {
    size_t w = in.num();
    if (w >= g_workers.size() || !g_workers[w].host()->timer) return "ok 0";
    g_workers[w].root->onTick(0);
    return "ok 1";
  }
  if (cmd == "metric") {
    auto it = g_metric_ids.find(in.str());
    if (it == g_metric_ids.end()) return "metric 0 0";
    return "metric 1 " + std::to_string(g_metrics[it->second - 1].value);
  }
  if (cmd == "logs") {
    std::string out = "logs " + std::to_string(g_logs.size());
    for (auto &l : g_logs) out += " " + esc(l);
    g_logs.clear();
    return out;
  }
  if (cmd == "failed") {
    int n = 0;
    for (auto &w : g_workers) n += w.wasm->wasm()->isFailed();
    return "failed " + std::to_string(n);
  }
  if (cmd == "memory") {
    size_t w = in.num();
    if (w >= g_workers.size()) return "err no such worker";
    return "memory " + std::to_string(g_workers[w].wasm->wasm()->wasm_vm()->getMemorySize());
  }
  if (cmd == "bench") return bench(in);
  if (cmd == "profile") return profile(in);
  if (cmd == "alloccost") {
    size_t w = in.num();
    uint64_t n = in.num();
    if (w >= g_workers.size() || n == 0) return "err no such worker";
    n = (n + 255) / 256 * 256;
    auto [full, bare] = g_workers[w].host()->allocCost(n, g_workers[w].root);
    return "alloccost " + std::to_string(full / n) + " " + std::to_string(bare / n);
  }
  return "err unknown command " + esc(cmd);
}

} // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "quit") break;
    std::cout << handle(line) << "\n" << std::flush;
  }
  g_streams.clear();
  g_workers.clear();
  return 0;
}
