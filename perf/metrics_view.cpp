#include "metrics_view.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "common/scoped_fd.h"

namespace pact::perf {

namespace {

using Clock = std::chrono::steady_clock;

// GET path from host:port over HTTP/1.0, bounded at 5 s; the body of a 200 or an error.
bool httpGet(const std::string& url, std::string* body, std::string* error) {
  std::string rest = url.substr(7);  // after "http://"
  const size_t slash = rest.find('/');
  const std::string path = slash == std::string::npos ? "/metrics" : rest.substr(slash);
  std::string hostport = rest.substr(0, slash);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon + 1 == hostport.size()) {
    *error = "'" + url + "': give http://HOST:PORT[/PATH]";
    return false;
  }
  std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    *error = url + ": " + gai_strerror(rc);
    return false;
  }
  ScopedFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const bool connected = fd.valid() && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0;
  freeaddrinfo(res);
  if (!connected) {
    *error = url + ": cannot connect (is PACT_METRICS_PORT set in that process?)";
    return false;
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + hostport + "\r\n\r\n";
  if (::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    *error = url + ": the request could not be sent";
    return false;
  }
  std::string resp;
  char buf[8192];
  const auto until = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    pollfd p{fd.get(), POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
      *error = url + ": no complete answer within 5 s";
      return false;
    }
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
      *error = url + ": the connection failed while reading";
      return false;
    }
    if (n == 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  const size_t head = resp.find("\r\n\r\n");
  const std::string status = resp.substr(0, resp.find("\r\n"));
  if (head == std::string::npos || status.find(" 200 ") == std::string::npos) {
    *error = url + ": answered '" + status + "', not 200";
    return false;
  }
  *body = resp.substr(head + 4);
  return true;
}

struct Row {
  std::string name;
  std::string value;
};

}  // namespace

int printMetrics(const std::string& source, std::FILE* out) {
  std::string text, error;
  if (source.rfind("http://", 0) == 0) {
    if (!httpGet(source, &text, &error)) {
      std::fprintf(stderr, "pact-info --metrics %s\n", error.c_str());
      return 2;
    }
  } else {
    std::ifstream in(source);
    if (!in) {
      std::fprintf(stderr, "pact-info --metrics: cannot read '%s' (give http://HOST:PORT or a PACT_METRICS_FILE)\n",
                   source.c_str());
      return 2;
    }
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Samples "pact_<scope>_<counter>{labels} value", grouped by scope and labels (a kind label
  // names the counter's series instead: errors{peer_lost}).
  std::map<std::string, std::vector<Row>> byGroup;
  std::istringstream lines(text);
  int n = 0, series = 0;
  for (std::string line; std::getline(lines, line);) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    const size_t brace = line.find('{');
    const size_t nameEnd = std::min(brace, space);
    const size_t close = brace == std::string::npos ? std::string::npos : line.rfind('}');
    const size_t scopeEnd = line.find('_', 5);
    if (line.rfind("pact_", 0) != 0 || space == std::string::npos || scopeEnd == std::string::npos ||
        scopeEnd >= nameEnd || (brace != std::string::npos && (close == std::string::npos || close > space))) {
      std::fprintf(stderr, "pact-info --metrics %s: line %d is not a pact sample: %s\n", source.c_str(), n, line.c_str());
      return 2;
    }
    std::string labels = brace == std::string::npos ? "" : line.substr(brace + 1, close - brace - 1);
    std::string name = line.substr(scopeEnd + 1, nameEnd - scopeEnd - 1);
    if (const size_t kind = labels.find("kind=\""); kind != std::string::npos && (kind == 0 || labels[kind - 1] == ',')) {
      const size_t end = labels.find('"', kind + 6), from = kind == 0 ? 0 : kind - 1;  // with its comma
      name += "{" + labels.substr(kind + 6, end - kind - 6) + "}";
      labels.erase(from, end + 1 - from);
      if (!labels.empty() && labels[0] == ',') labels.erase(0, 1);
    }
    const std::string group = line.substr(5, scopeEnd - 5) + (labels.empty() ? "" : "{" + labels + "}");
    byGroup[group].push_back({name, line.substr(space + 1)});
    ++series;
  }
  std::fprintf(out, "metrics from %s: %d series, %zu groups\n", source.c_str(), series, byGroup.size());
  for (const auto& [group, rows] : byGroup) {
    std::fprintf(out, "%s\n", group.c_str());
    for (const Row& r : rows) std::fprintf(out, "  %-28s %s\n", r.name.c_str(), r.value.c_str());
  }
  return 0;
}

}  // namespace pact::perf
