#include "telemetry/exporter.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/replace_file.h"
#include "common/scoped_fd.h"
#include "telemetry/exposition.h"
#include "telemetry/shared.h"

namespace pact::telemetry {

namespace {

using Clock = std::chrono::steady_clock;

// "HOST:PORT" / "[V6]:PORT" -> a bound, listening, non-blocking socket; an error names why.
ScopedFd listenOn(const std::string& address, std::string* bound, std::string* error) {
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  const int port = std::stoi(address.substr(colon + 1));
  const bool v6 = !host.empty() && host.front() == '[';
  if (v6) host = host.substr(1, host.size() - 2);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET6, host.c_str(), &a->sin6_addr);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, host.c_str(), &a->sin_addr);
    len = sizeof *a;
  }
  ScopedFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const int one = 1;
  if (!fd.valid() || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd.get(), 16) != 0) {
    *error = std::strerror(errno);
    return {};
  }
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    const int p = v6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                     : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    *bound = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(p);
  }
  return fd;
}

// The text, per comm when the exporter's config asks.
std::string exposition() {
  ExportClaim& claim = shared().claim;
  bool perComm = false;
  {
    std::lock_guard lock(claim.mu);
    perComm = claim.perComm;
  }
  return prometheusText(Registry::process(), perComm);
}

void sendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 1000) <= 0) return;  // a client that does not read: dropped
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

// One request per connection, read for at most 1 s and 8 KiB; answered and closed.
void serve(int client) {
  std::string req;
  char buf[2048];
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos &&
         req.size() < 8192 && Clock::now() < until) {
    pollfd p{client, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(client, buf, sizeof buf, 0);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
  }
  const auto line = req.substr(0, req.find_first_of("\r\n"));
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (line.rfind("GET /metrics", 0) == 0 && (line.size() == 12 || line[12] == ' ' || line[12] == '?')) {
    body = exposition();
  } else if (line.rfind("GET / ", 0) == 0) {
    type = "text/plain; charset=utf-8";
    body = "pact metrics: GET /metrics\n";
  } else if (line.rfind("GET ", 0) == 0) {
    status = "404 Not Found", type = "text/plain; charset=utf-8", body = "not found; GET /metrics\n";
  } else {
    status = "405 Method Not Allowed", type = "text/plain; charset=utf-8", body = "GET /metrics only\n";
  }
  sendAll(client, "HTTP/1.0 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
}

// The metrics file, replaced whole; the first failure is a WARN.
void writeFile(const std::string& path) {
  std::string error;
  const bool ok = writeMetricsFile(path, &error);
  static bool warned = false;
  if (!ok && !warned) PACT_WARN("PACT_METRICS_FILE=%s: cannot write it", error.c_str());
  warned = warned || !ok;
}

class Exporter {
 public:
  Exporter(const ExportConfig& c, ScopedFd listener, std::string address)
      : config_(c), listener_(std::move(listener)), address_(std::move(address)) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) wakeRead_.reset(p[0]), wakeWrite_.reset(p[1]);
    thread_ = std::thread([this] { run(); });
  }
  ~Exporter() {
    if (wakeWrite_.valid()) (void)!::write(wakeWrite_.get(), "x", 1);
    if (thread_.joinable()) thread_.join();
    if (!config_.file.empty()) writeFile(config_.file);  // the last word at exit
  }
  const std::string& address() const { return address_; }
  const std::string& file() const { return config_.file; }

 private:
  void run() {
    auto due = Clock::now() + config_.interval;
    for (;;) {
      int timeout = -1;
      if (!config_.file.empty() && config_.interval.count() > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count();
        timeout = static_cast<int>(std::max<long long>(0, left));
      }
      pollfd p[2] = {{wakeRead_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
      const int n = ::poll(p, listener_.valid() ? 2 : 1, timeout);
      if (n > 0 && (p[0].revents & POLLIN)) return;
      if (n > 0 && listener_.valid() && (p[1].revents & POLLIN)) {
        ScopedFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (client.valid()) serve(client.get());
      }
      if (timeout >= 0 && Clock::now() >= due) {
        writeFile(config_.file);
        due = Clock::now() + config_.interval;
      }
    }
  }

  ExportConfig config_;
  ScopedFd listener_, wakeRead_, wakeWrite_;
  std::string address_;
  std::thread thread_;
};

// This copy's exporter, if it started the process's one (shared().claim says whether one runs in
// any copy). Stopped, and the claim given up, by static destruction: at exit, or when this copy
// is unloaded.
struct Owned {
  std::unique_ptr<Exporter> exporter;
  ~Owned() { stopExporter(); }
} gOwned;

}  // namespace

void startExporter(const ExportConfig& config) {
  ExportClaim& claim = shared().claim;
  std::lock_guard lock(claim.mu);
  if (claim.running) return;
  claim.perComm = config.perComm;  // pact_plugin_metrics_write's text too
  if (config.listen.empty() && config.file.empty()) return;
  ScopedFd listener;
  std::string bound, error;
  if (!config.listen.empty()) {
    listener = listenOn(config.listen, &bound, &error);
    if (!listener.valid())
      PACT_WARN("PACT_METRICS_PORT=%s: cannot listen there: %s; no metrics endpoint", config.listen.c_str(),
                error.c_str());
    else
      PACT_INFO("metrics: http://%s/metrics", bound.c_str());
  }
  if (!listener.valid() && config.file.empty()) return;
  gOwned.exporter = std::make_unique<Exporter>(config, std::move(listener), bound);
  claim.running = true;
  claim.address = bound;
  claim.file = config.file;
}

void stopExporter() {
  std::unique_ptr<Exporter> e;
  {
    ExportClaim& claim = shared().claim;
    std::lock_guard lock(claim.mu);
    if (!gOwned.exporter) return;  // none, or another copy's
    e = std::move(gOwned.exporter);
    claim.running = false;
    claim.address.clear();
    claim.file.clear();
  }
}

namespace {
std::string claimedFile() {
  ExportClaim& claim = shared().claim;
  std::lock_guard lock(claim.mu);
  return claim.file;
}
}  // namespace

void flushMetricsFile() {
  const std::string file = claimedFile();
  if (!file.empty()) writeFile(file);
}

bool writeMetricsFile(const std::string& path, std::string* error) {
  const std::string target = path.empty() ? claimedFile() : path;
  if (target.empty()) {
    *error = "no file: PACT_METRICS_FILE is not set and no path was given";
    return false;
  }
  const std::string text = exposition();
  return replaceFile(
      target, [&](std::FILE* f) { return std::fwrite(text.data(), 1, text.size(), f) == text.size(); }, error);
}

std::string exporterAddress() {
  ExportClaim& claim = shared().claim;
  std::lock_guard lock(claim.mu);
  return claim.address;
}

}  // namespace pact::telemetry
