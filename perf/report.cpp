#include "report.h"

#include "peer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>  // environ (g++ defines _GNU_SOURCE)

namespace pact::perf {

std::string defaultPluginPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "libnccl-net-pact.so";
  return (exe.parent_path() / ".." / "plugin" / "libnccl-net-pact.so").lexically_normal().string();
}

Percentiles percentiles(std::vector<double>& samples) {
  Percentiles p;
  if (samples.empty()) return p;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double q) {
    size_t n = samples.size();
    size_t idx = static_cast<size_t>(std::ceil(q / 100.0 * static_cast<double>(n)));
    return samples[std::clamp<size_t>(idx, 1, n) - 1];
  };
  p.p50 = rank(50);
  p.p95 = rank(95);
  p.p99 = rank(99);
  return p;
}

bool parseSize(const std::string& text, size_t* out) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 15) return false;
  unsigned long long value = std::stoull(text.substr(0, pos));
  std::string suffix;
  for (char c : text.substr(pos))
    suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    shift = 30;
  } else {
    return false;
  }
  *out = static_cast<size_t>(value) << shift;
  return true;
}

std::string formatSize(size_t bytes) {
  static const char* kUnits[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + kUnits[u];
}

std::vector<size_t> sweep(size_t lo, size_t hi, size_t factor) {
  std::vector<size_t> sizes;
  if (lo == 0 || factor < 2 || lo > hi) return sizes;
  for (size_t s = lo; s <= hi; s *= factor) {
    sizes.push_back(s);
    if (s > hi / factor) break;
  }
  return sizes;
}

size_t streamSlots(size_t wanted, size_t max_bytes) {
  constexpr size_t kSlotBudget = 512u << 20;  // bytes of bandwidth buffer slots per process
  return std::clamp<size_t>(kSlotBudget / max_bytes, 1, std::max<size_t>(wanted, 1));
}

long streamIters(size_t budget, size_t size, long max_iters) {
  return std::clamp<long>(static_cast<long>(budget / size), 5, std::max<long>(max_iters, 5));
}

long streamWarmup(long iters) { return std::clamp<long>(iters / 10, 1, 1000); }

void printTable(std::FILE* out, const std::vector<SizeRow>& rows) {
  // Two tables, each with only the sizes it measured (no rows of dashes).
  if (std::any_of(rows.begin(), rows.end(), [](const SizeRow& r) { return r.has_bw; })) {
    std::fprintf(out, "# bandwidth, at the receiver\n%10s %10s %10s %10s %10s\n", "size", "bw_GB/s",
                 "bw_p50_us", "bw_p95_us", "bw_p99_us");
    for (const SizeRow& r : rows) {
      if (!r.has_bw) continue;
      std::fprintf(out, "%10s %10.3f %10.2f %10.2f %10.2f\n", formatSize(r.size).c_str(), r.bw_gbps,
                   r.bw_us.p50, r.bw_us.p95, r.bw_us.p99);
    }
  }
  if (std::any_of(rows.begin(), rows.end(), [](const SizeRow& r) { return r.has_lat; })) {
    std::fprintf(out, "# latency, one-way (RTT/2)\n%10s %10s %10s %10s\n", "size", "lat_p50_us",
                 "lat_p95_us", "lat_p99_us");
    for (const SizeRow& r : rows) {
      if (!r.has_lat) continue;
      std::fprintf(out, "%10s %10.2f %10.2f %10.2f\n", formatSize(r.size).c_str(), r.lat_us.p50,
                   r.lat_us.p95, r.lat_us.p99);
    }
  }
  std::fflush(out);
}

nlohmann::json toJson(const nlohmann::json& meta, const std::vector<SizeRow>& rows) {
  nlohmann::json results = nlohmann::json::array();
  for (const SizeRow& r : rows) {
    nlohmann::json j;
    j["size"] = r.size;
    auto put = [&](const char* key, bool has, double v) {
      j[key] = has ? nlohmann::json(v) : nlohmann::json(nullptr);
    };
    put("bw_gbps", r.has_bw, r.bw_gbps);
    put("bw_p50_us", r.has_bw, r.bw_us.p50);
    put("bw_p95_us", r.has_bw, r.bw_us.p95);
    put("bw_p99_us", r.has_bw, r.bw_us.p99);
    j["bw_iters"] = r.bw_iters;
    put("lat_p50_us", r.has_lat, r.lat_us.p50);
    put("lat_p95_us", r.has_lat, r.lat_us.p95);
    put("lat_p99_us", r.has_lat, r.lat_us.p99);
    j["lat_iters"] = r.lat_iters;
    results.push_back(std::move(j));
  }
  return nlohmann::json{{"meta", meta}, {"results", results}};
}

bool writeJson(const std::string& path, const nlohmann::json& doc, std::string* error) {
  std::ofstream f(path);
  if (!f) {
    *error = "cannot open " + path + " for writing";
    return false;
  }
  f << doc.dump(2) << '\n';
  if (!f) {
    *error = "write to " + path + " failed";
    return false;
  }
  return true;
}

std::string plotScriptPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "pact-plot" : (exe.parent_path() / "pact-plot").string();
}

bool writeOutputs(const nlohmann::json& doc, const std::string& json, const std::string& svg,
                  std::string* error) {
  if (!json.empty() && !writeJson(json, doc, error)) return false;
  if (svg.empty()) return true;
  const std::string script = plotScriptPath();
  if (::access(script.c_str(), R_OK) != 0) {
    *error = "--plot: " + script + " not found (pact-plot is installed beside pact-perf)";
    return false;
  }
  std::string input = json;
  std::string temp;
  if (input.empty()) {  // the plot reads a file: a private one, removed after
    char name[] = "/tmp/pact-perf-plot-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) {
      *error = "--plot: cannot create a temporary file";
      return false;
    }
    ::close(fd);
    temp = input = name;
    if (!writeJson(input, doc, error)) {
      std::remove(temp.c_str());
      return false;
    }
  }
  std::vector<std::string> args = {"python3", script, svg, input};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int status = 0;
  const int rc = ::posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ);
  if (rc == 0) ::waitpid(pid, &status, 0);
  if (!temp.empty()) std::remove(temp.c_str());
  if (rc != 0) {
    *error = "--plot: cannot run python3 (" + std::string(std::strerror(rc)) + ")";
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = "--plot: pact-plot could not draw " + svg + " (its message is above)";
    return false;
  }
  return true;
}

int finishRun(int rc, const char* who, const nlohmann::json& doc, const std::string& json,
              const std::string& svg) {
  std::string err;
  if ((!json.empty() || !svg.empty()) && !writeOutputs(doc, json, svg, &err)) {
    std::fprintf(stderr, "%s: %s\n", who, err.c_str());
    rc = 1;
  }
  if (!reapPeer()) {
    std::fprintf(stderr, "%s: peer process failed\n", who);
    rc = 1;
  }
  return rc;
}

}  // namespace pact::perf
