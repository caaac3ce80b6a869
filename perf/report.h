// Result rows shared by pact-perf scenarios, their text table and JSON file, and size helpers.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace pact::perf {

struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0;
};

// Nearest-rank percentiles of samples (sorted in place). Zeros when samples is empty.
Percentiles percentiles(std::vector<double>& samples);

// One message size. A scenario may fill only bandwidth or only latency; the other stays absent.
struct SizeRow {
  size_t size = 0;
  bool has_bw = false;
  double bw_gbps = 0;  // 1e9 bytes per second
  Percentiles bw_us;   // per-message completion interval, microseconds
  long bw_iters = 0;
  bool has_lat = false;
  Percentiles lat_us;  // one-way latency (RTT / 2), microseconds
  long lat_iters = 0;
};

// The pact plugin next to this tool: <exe dir>/../plugin/libnccl-net-pact.so.
std::string defaultPluginPath();

// "8", "4K", "1M", "1G" (binary multiples). Also accepts KB/KiB style suffixes.
bool parseSize(const std::string& text, size_t* out);
std::string formatSize(size_t bytes);

// Geometric sweep lo, lo*factor, ... <= hi. Empty if the arguments make no sense.
std::vector<size_t> sweep(size_t lo, size_t hi, size_t factor);

// The bandwidth stream's sizing, the same for pact-perf p2p and its raw-UCP baseline pact-ucp-bw
// (they are compared size by size): slot buffers per side for a largest message of max_bytes
// (`wanted` of them, within 512 MiB, at least one); messages per size (budget / size, 5 ..
// max(max_iters, 5)); warm-up messages before the measured ones (a tenth, 1 .. 1000).
size_t streamSlots(size_t wanted, size_t max_bytes);
long streamIters(size_t budget, size_t size, long max_iters);
long streamWarmup(long iters);

// Writes the rows as an aligned text table.
void printTable(std::FILE* out, const std::vector<SizeRow>& rows);

// {"meta": meta, "results": [{size, bw_gbps, bw_p50_us, ..., lat_p99_us}]}; absent values are null.
nlohmann::json toJson(const nlohmann::json& meta, const std::vector<SizeRow>& rows);
bool writeJson(const std::string& path, const nlohmann::json& doc, std::string* error);

// A scenario's --json and --plot: the document written to `json` (when named) and drawn into the
// SVG `svg` (when named) by pact-plot (perf/plot.py, copied beside pact-perf in the build and
// installed with it), run with python3. False with the reason (a plot that could not be drawn
// names pact-plot's own message).
bool writeOutputs(const nlohmann::json& doc, const std::string& json, const std::string& svg,
                  std::string* error);
// pact-plot beside this executable.
std::string plotScriptPath();

// The end of rank 0 in a two-process scenario (p2p, mix --face nccl): doc written as writeOutputs
// writes it when json or svg is named, then the peer reaped (peer.h). Each failure is printed as
// "<who>: <reason>" on stderr and makes the result 1; otherwise the result is rc.
int finishRun(int rc, const char* who, const nlohmann::json& doc, const std::string& json,
              const std::string& svg);

}  // namespace pact::perf
