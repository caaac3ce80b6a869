// pact-kv-c-bench: perf/kv_peers_bench.py's pact workload through the C API (pact.h) alone, so
// the Python package's overhead over C can be reported as a ratio. Two engines in this process;
// a request moves COUNT blocks of SIZE bytes scattered over every other page of a 1 GiB pool on
// each side, one request at a time: expect, send, wait for the receiver's commit, release both.
// Prints one JSON object per (size, count): goodput_gbs, p50_us, p99_us, requests, failed, and
// calls_p50_us, the median time of each call of a request (expect, send, the wait for the
// receiver's commit, the wait for the sender to be final).
// Usage: pact-kv-c-bench SIZE:COUNT:REQUESTS:SEED ...  (the Python bench passes its plan)
#include <pact/pact.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kPool = 1ull << 30;
using Clock = std::chrono::steady_clock;
// The calls of a request, timed one by one (perf/kv_py_calls.py times the package's the same way).
constexpr std::array<const char*, 4> kCalls = {"expect", "send", "commit", "sender"};

double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void must(pact_status_t s, const char* what) {
  if (s == PACT_OK) return;
  std::fprintf(stderr, "pact-kv-c-bench: %s: %s (%s)\n", what, pact_status_string(s), pact_last_error());
  std::exit(1);
}

// Offsets of count pages among every other page of the pool, distinct (the Python plan's shape).
std::vector<uint64_t> scatter(uint64_t size, size_t count, std::mt19937_64& rng) {
  std::vector<uint64_t> pages(kPool / size / 2);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<uint64_t> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = pages[i] * 2 * size;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: pact-kv-c-bench SIZE:COUNT:REQUESTS:SEED ...\n");
    return 2;
  }
  pact_engine_config_t c;
  pact_engine_config_init(&c);
  c.listen_ip = "127.0.0.1";
  c.model_epoch = 1;
  c.progress_thread = 1;  // as the Python package's default
  c.name = "bench-rx";
  pact_engine_t rx = nullptr, tx = nullptr;
  must(pact_engine_create(&c, &rx), "engine rx");
  c.name = "bench-tx";
  must(pact_engine_create(&c, &tx), "engine tx");
  char address[128];
  must(pact_engine_address(rx, address, sizeof address), "address");
  pact_peer_t peer = 0;
  must(pact_connect(tx, address, 10000, &peer), "connect");
  std::vector<uint8_t> src(kPool, 1), dst(kPool, 0);
  pact_mr_t ms = nullptr, md = nullptr;
  must(pact_mem_register(tx, src.data(), src.size(), &ms), "register src");
  must(pact_mem_register(rx, dst.data(), dst.size(), &md), "register dst");
  uint64_t request = 0;
  for (int a = 1; a < argc; ++a) {
    unsigned long long size = 0, count = 0, requests = 0, seed = 0;
    if (std::sscanf(argv[a], "%llu:%llu:%llu:%llu", &size, &count, &requests, &seed) != 4 ||
        size == 0 || count == 0 || count * 2 * size > kPool) {
      std::fprintf(stderr, "pact-kv-c-bench: '%s': expected SIZE:COUNT:REQUESTS:SEED within 1 GiB\n", argv[a]);
      return 2;
    }
    std::mt19937_64 rng(seed);
    const auto so = scatter(size, count, rng), d = scatter(size, count, rng);
    std::vector<pact_block_t> sb(count), db(count);
    for (size_t i = 0; i < count; ++i) {
      sb[i] = {ms, so[i], size};
      db[i] = {md, d[i], size};
    }
    std::vector<double> times;
    std::vector<double> calls[kCalls.size()];
    unsigned failed = 0;
    for (unsigned long long r = 0; r <= requests; ++r) {  // request 0 warms up
      const pact_key_t key{++request, 0, 1, 0};
      Clock::time_point t[5];
      t[0] = Clock::now();
      pact_xfer_t x = 0, s = 0;
      must(pact_expect(rx, &key, db.data(), count, 0, nullptr, &x), "expect");
      t[1] = Clock::now();
      must(pact_send(tx, peer, &key, sb.data(), count, 0, nullptr, &s), "send");
      t[2] = Clock::now();
      pact_xfer_info_t xi{}, si{};
      must(pact_xfer_wait(rx, x, 60000, &xi), "wait receiver");
      t[3] = Clock::now();
      must(pact_xfer_wait(tx, s, 60000, &si), "wait sender");
      t[4] = Clock::now();
      (void)pact_xfer_release(rx, x);
      (void)pact_xfer_release(tx, s);
      const double us = micros(t[0], Clock::now());
      if (r == 0) continue;
      failed += xi.result != PACT_OK;
      times.push_back(us);
      for (size_t c = 0; c < kCalls.size(); ++c) calls[c].push_back(micros(t[c], t[c + 1]));
    }
    std::sort(times.begin(), times.end());
    const double total = std::accumulate(times.begin(), times.end(), 0.0);
    std::string split;
    for (size_t c = 0; c < kCalls.size(); ++c) {
      char one[64];
      std::snprintf(one, sizeof one, "%s\"%s\": %.2f", c ? ", " : "", kCalls[c], median(calls[c]));
      split += one;
    }
    std::printf("{\"size\": %llu, \"blocks\": %llu, \"result\": {\"goodput_gbs\": %.4f, \"p50_us\": %.1f, "
                "\"p99_us\": %.1f, \"requests\": %zu, \"failed\": %u, \"calls_p50_us\": {%s}}}\n",
                size, count, size * count * times.size() / total / 1e3, times[times.size() / 2],
                times[std::min(times.size() - 1, static_cast<size_t>(times.size() * 0.99))],
                times.size(), failed, split.c_str());
    std::fflush(stdout);
  }
  must(pact_mem_deregister(tx, ms), "deregister");
  must(pact_mem_deregister(rx, md), "deregister");
  pact_engine_destroy(tx);
  pact_engine_destroy(rx);
  return 0;
}
