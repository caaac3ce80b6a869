// pact-engine-rails: goodput of the transfer engine between two processes, one the receiver and
// one the sender, each started by the caller wherever it should run (perf/netns-engine-rails.sh
// starts them with `ip netns exec pactA ...` and `ip netns exec pactB ...`). Only the public C
// API (include/pact/pact.h, libpact.so) is used; PACT_* / UCX_* come from the environment.
//
//   pact-engine-rails recv --listen IP:PORT [--count N] [--size S] [--tc CLASS] [--links a,b]
//                          [--timeout-ms T] [--linger-ms L]
//   pact-engine-rails send --connect IP:PORT [--count N] [--size S] [--tc CLASS] [--window W]
//                          [--timeout-ms T]
//
// Both sides move 1 + N transfers of S bytes each (one block, class CLASS, default KV): key
// request 1 is a warmup (connection wireup, first rendezvous), keys 2..N+1 are measured. The
// receiver expects all of them at once (into one registered buffer, pages touched beforehand);
// the sender sends the warmup, waits until it is final, then keeps W transfers in flight (0 =
// all N posted at once). The commit hook stamps each commit (CLOCK_MONOTONIC):
//   goodput = N * S / (last data commit - warmup commit)    (receiver, the figure reported)
// The sender reports its own view (first data send .. last data transfer final) for a check.
// After the timing the receiver checks every byte against the key's pattern.
// --links: links whose rx_bytes (/sys/class/net/<link>/statistics) the receiver reports as the
// growth over the data transfers, e.g. pa0,pa1 (default: none).
// --linger-ms: how long the receiver keeps its engine after the last commit, so that the sender
// hears every verdict before the connection closes (default 1000).
//
// Output: one line starting with "RESULT " and space-separated key=value pairs:
//   recv: role=recv gbit_s seconds bytes committed bad rx_<link>=bytes ...
//   send: role=send gbit_s seconds bytes ok
// Exit status: 0 when every transfer committed byte-exact (recv) / ended PACT_OK (send),
// 1 otherwise (the reason on stderr), 2 on bad usage.
#include <pact/pact.h>

#include "engines.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "pact-engine-rails: %s\n"
               "usage: pact-engine-rails recv --listen IP:PORT [--count N] [--size S] [--tc CLASS]"
               " [--links a,b] [--timeout-ms T] [--linger-ms L]\n"
               "       pact-engine-rails send --connect IP:PORT [--count N] [--size S]"
               " [--tc CLASS] [--window W] [--timeout-ms T]\n",
               why);
  std::exit(2);
}

[[noreturn]] void fail(const std::string& what, pact_status_t st) {
  std::fprintf(stderr, "pact-engine-rails: %s: %s (%s)\n", what.c_str(), pact_status_string(st),
               pact_last_error());
  std::exit(1);
}

void check(pact_status_t st, const std::string& what) {
  if (st != PACT_OK) fail(what, st);
}

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// "4M", "256K", "1G", "4096" -> bytes.
uint64_t parseSize(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str()) usage(("bad size '" + s + "'").c_str());
  uint64_t mult = 1;
  const std::string unit(end);
  if (unit == "K" || unit == "k") mult = 1ull << 10;
  else if (unit == "M" || unit == "m") mult = 1ull << 20;
  else if (unit == "G" || unit == "g") mult = 1ull << 30;
  else if (!unit.empty()) usage(("bad size unit in '" + s + "'").c_str());
  return static_cast<uint64_t>(v) * mult;
}

uint64_t parseUint(const std::string& s, const char* what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') usage((std::string("bad ") + what).c_str());
  return static_cast<uint64_t>(v);
}

struct Options {
  bool recv = false;
  std::string address;  // recv: listen IP:PORT; send: connect IP:PORT
  uint64_t count = 64;
  uint64_t size = 4ull << 20;
  std::string tc = "KV";
  std::vector<std::string> links;
  uint64_t window = 0;
  int timeoutMs = 120000;
  int lingerMs = 1000;
};

Options parse(int argc, char** argv) {
  if (argc < 2) usage("no mode (recv or send)");
  Options o;
  const std::string mode = argv[1];
  if (mode == "recv") o.recv = true;
  else if (mode != "send") usage(("unknown mode '" + mode + "'").c_str());
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage((a + " needs a value").c_str());
    const std::string v = argv[++i];
    if ((a == "--listen" && o.recv) || (a == "--connect" && !o.recv)) o.address = v;
    else if (a == "--count") o.count = parseUint(v, "--count");
    else if (a == "--size") o.size = parseSize(v);
    else if (a == "--tc") o.tc = v;
    else if (a == "--window" && !o.recv) o.window = parseUint(v, "--window");
    else if (a == "--timeout-ms") o.timeoutMs = static_cast<int>(parseUint(v, "--timeout-ms"));
    else if (a == "--linger-ms" && o.recv) o.lingerMs = static_cast<int>(parseUint(v, "--linger-ms"));
    else if (a == "--links" && o.recv) {
      size_t p = 0;
      while (p <= v.size()) {
        const size_t q = std::min(v.find(',', p), v.size());
        if (q > p) o.links.push_back(v.substr(p, q - p));
        p = q + 1;
      }
    } else {
      usage(("unknown option '" + a + "' for " + mode).c_str());
    }
  }
  if (o.address.empty()) usage(o.recv ? "recv needs --listen IP:PORT" : "send needs --connect IP:PORT");
  if (o.count == 0 || o.size == 0) usage("--count and --size must be positive");
  return o;
}

// The pattern of key request r: 64-bit words r * golden + word index (the tail byte-wise).
void fillPattern(uint8_t* p, uint64_t n, uint64_t r) {
  const uint64_t base = r * 0x9E3779B97F4A7C15ull;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = base + i / 8;
    std::memcpy(p + i, &w, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(base + i);
}
bool matchesPattern(const uint8_t* p, uint64_t n, uint64_t r) {
  const uint64_t base = r * 0x9E3779B97F4A7C15ull;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = base + i / 8;
    if (std::memcmp(p + i, &w, 8) != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != static_cast<uint8_t>(base + i)) return false;
  }
  return true;
}

uint64_t linkRx(const std::string& link) {
  std::ifstream f("/sys/class/net/" + link + "/statistics/rx_bytes");
  uint64_t v = 0;
  if (!(f >> v)) {
    std::fprintf(stderr, "pact-engine-rails: cannot read rx_bytes of link '%s'\n", link.c_str());
    std::exit(1);
  }
  return v;
}

pact_engine_t makeEngine(const char* name, const char* ip, uint16_t port) {
  pact_engine_t e = nullptr;
  check(pact::perf::progressEngine(name, ip, port, &e), "pact_engine_create");
  return e;
}

// Commit times by request id (1 = warmup, 2..N+1 = data), written by the hook.
std::vector<std::atomic<int64_t>>* gCommitNs = nullptr;

int onCommit(void*, pact_xfer_t, const pact_key_t* key, pact_peer_t, const pact_block_t*, size_t) {
  const int64_t t = nowNs();
  if (key->request_id < gCommitNs->size()) (*gCommitNs)[key->request_id].store(t);
  return 0;
}

int runRecv(const Options& o) {
  const size_t colon = o.address.rfind(':');
  if (colon == std::string::npos) usage("--listen wants IP:PORT");
  const std::string ip = o.address.substr(0, colon);
  const uint16_t port = static_cast<uint16_t>(parseUint(o.address.substr(colon + 1), "port"));
  const uint64_t n = o.count + 1;
  std::vector<std::atomic<int64_t>> commits(n + 1);
  for (auto& c : commits) c.store(0);
  gCommitNs = &commits;

  pact_engine_t e = makeEngine("rails-rx", ip.c_str(), port);
  check(pact_set_commit_hook(e, onCommit, nullptr), "pact_set_commit_hook");
  std::vector<uint8_t> mem(n * o.size, 0);  // zeroed: every page touched before the clock starts
  pact_mr_t mr = nullptr;
  check(pact_mem_register(e, mem.data(), mem.size(), &mr), "pact_mem_register");
  std::vector<pact_xfer_t> xs(n);
  for (uint64_t i = 0; i < n; ++i) {
    const pact_key_t k{i + 1, 0, 0, 0};
    const pact_block_t b{mr, i * o.size, o.size};
    check(pact_expect(e, &k, &b, 1, 0, o.tc.c_str(), &xs[i]), "pact_expect " + std::to_string(i + 1));
  }
  std::printf("READY\n");
  std::fflush(stdout);

  std::vector<uint64_t> rx0;
  pact_xfer_info_t info{};
  pact_status_t st = pact_xfer_wait(e, xs[0], o.timeoutMs, &info);
  if (st != PACT_OK) fail("waiting for the warmup transfer", st);
  if (info.result != PACT_OK) fail("warmup transfer", info.result);
  for (const auto& l : o.links) rx0.push_back(linkRx(l));

  uint64_t committed = 0, bad = 0;
  for (uint64_t i = 1; i < n; ++i) {
    st = pact_xfer_wait(e, xs[i], o.timeoutMs, &info);
    if (st != PACT_OK) fail("waiting for transfer " + std::to_string(i + 1), st);
    if (info.result != PACT_OK) {
      std::fprintf(stderr, "pact-engine-rails: transfer %" PRIu64 " ended %s\n", i + 1,
                   pact_status_string(info.result));
    } else {
      ++committed;
    }
  }
  std::vector<uint64_t> rx1;
  for (const auto& l : o.links) rx1.push_back(linkRx(l));
  const int64_t t0 = commits[1].load();
  int64_t t1 = 0;
  for (uint64_t r = 2; r <= n; ++r) t1 = std::max(t1, commits[r].load());
  for (uint64_t i = 0; i < n; ++i) {
    if (!matchesPattern(mem.data() + i * o.size, o.size, i + 1)) ++bad;
  }
  for (uint64_t i = 0; i < n; ++i) check(pact_xfer_release(e, xs[i]), "pact_xfer_release");

  const uint64_t bytes = o.count * o.size;
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  std::printf("RESULT role=recv gbit_s=%.4f seconds=%.4f bytes=%" PRIu64 " committed=%" PRIu64
              " bad=%" PRIu64,
              secs > 0 ? static_cast<double>(bytes) * 8 / secs / 1e9 : 0.0, secs, bytes, committed, bad);
  for (size_t i = 0; i < o.links.size(); ++i) {
    std::printf(" rx_%s=%" PRIu64, o.links[i].c_str(), rx1[i] - rx0[i]);
  }
  std::printf("\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(o.lingerMs));  // the sender's verdicts
  check(pact_mem_deregister(e, mr), "pact_mem_deregister");
  pact_engine_destroy(e);
  return committed == o.count && bad == 0 ? 0 : 1;
}

int runSend(const Options& o) {
  const uint64_t n = o.count + 1;
  pact_engine_t e = makeEngine("rails-tx", nullptr, 0);
  std::vector<uint8_t> mem(n * o.size);
  for (uint64_t i = 0; i < n; ++i) fillPattern(mem.data() + i * o.size, o.size, i + 1);
  pact_mr_t mr = nullptr;
  check(pact_mem_register(e, mem.data(), mem.size(), &mr), "pact_mem_register");

  // The receiver may not listen yet: retry until the timeout.
  pact_peer_t peer = 0;
  const int64_t giveUp = nowNs() + static_cast<int64_t>(o.timeoutMs) * 1000000;
  for (;;) {
    const pact_status_t st = pact_connect(e, o.address.c_str(), 2000, &peer);
    if (st == PACT_OK) break;
    if (nowNs() > giveUp) fail("pact_connect " + o.address, st);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  auto send = [&](uint64_t i) {
    const pact_key_t k{i + 1, 0, 0, 0};
    const pact_block_t b{mr, i * o.size, o.size};
    pact_xfer_t x = 0;
    check(pact_send(e, peer, &k, &b, 1, 0, o.tc.c_str(), &x), "pact_send " + std::to_string(i + 1));
    return x;
  };
  uint64_t ok = 0;
  auto finish = [&](pact_xfer_t x, uint64_t i) {
    pact_xfer_info_t info{};
    const pact_status_t st = pact_xfer_wait(e, x, o.timeoutMs, &info);
    if (st != PACT_OK) fail("waiting for transfer " + std::to_string(i + 1), st);
    if (info.result == PACT_OK) {
      ++ok;
    } else {
      std::fprintf(stderr, "pact-engine-rails: send %" PRIu64 " ended %s\n", i + 1,
                   pact_status_string(info.result));
    }
    check(pact_xfer_release(e, x), "pact_xfer_release");
  };
  finish(send(0), 0);  // warmup
  ok = 0;

  const uint64_t window = o.window == 0 ? o.count : o.window;
  const int64_t t0 = nowNs();
  std::vector<pact_xfer_t> xs(n);
  uint64_t posted = 1, done = 1;
  while (done < n) {
    while (posted < n && posted - done < window) {
      xs[posted] = send(posted);
      ++posted;
    }
    finish(xs[done], done);
    ++done;
  }
  const int64_t t1 = nowNs();
  const uint64_t bytes = o.count * o.size;
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  std::printf("RESULT role=send gbit_s=%.4f seconds=%.4f bytes=%" PRIu64 " ok=%" PRIu64 "\n",
              secs > 0 ? static_cast<double>(bytes) * 8 / secs / 1e9 : 0.0, secs, bytes, ok);
  std::fflush(stdout);
  check(pact_mem_deregister(e, mr), "pact_mem_deregister");
  pact_engine_destroy(e);
  return ok == o.count ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  return o.recv ? runRecv(o) : runSend(o);
}
