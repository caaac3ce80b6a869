// What tests/tools/diag_test.py and trace_test.py run: a host that drives a plugin the way NCCL
// does over one loopback pair (listen, connect/accept polled, the same buffer registered twice on
// the send comm, one 4 KiB message), closes the send comm and exits with the receive comm still
// open, so PACT_DIAG's close line and exit lines both appear, and the trace is written at exit.
// With PROBE_TRACE_WRITE=PATH it calls pact_plugin_trace_write(PATH) after the message (while
// both comms are open; "-": NULL, PACT_TRACE_FILE) and prints its result; with
// PROBE_METRICS_WRITE=PATH it calls pact_plugin_metrics_write(PATH.posted) with the message's
// two requests posted, PATH.open there and PATH.closed after the send comm's close. Exit status 0 when every
// call succeeded. Usage: plugin_probe PLUGIN.so
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cstdlib>

#include "pact/nccl_ext.h"
#include "plugin/loader/net_plugin.h"

using pact::loader::NetPlugin;

namespace {
int fail(const char* what, int rc) {
  std::fprintf(stderr, "plugin_probe: %s returned %d %s\n", what, rc, NetPlugin::takeLastWarning().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string error;
  auto p = NetPlugin::open(argv[1], 0, &error);
  if (!p) {
    std::fprintf(stderr, "plugin_probe: %s\n", error.c_str());
    return 1;
  }
  if (int rc = p->init(-1, false); rc != 0) return fail("init", rc);
  char handle[pact::loader::kHandleSize] = {};
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  if (int r = p->listen(0, handle, &lc); r != 0) return fail("listen", r);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((sc == nullptr || rc == nullptr) && std::chrono::steady_clock::now() < deadline) {
    if (sc == nullptr)
      if (int r = p->connect(0, handle, &sc); r != 0) return fail("connect", r);
    if (rc == nullptr)
      if (int r = p->accept(lc, &rc); r != 0) return fail("accept", r);
  }
  if (sc == nullptr || rc == nullptr) return fail("connect/accept (timed out)", -1);
  (void)p->closeListen(lc);
  std::vector<char> src(4096, 7), dst(4096, 0);
  void *smh = nullptr, *smh2 = nullptr, *rmh = nullptr;
  if (int r = p->regMr(sc, src.data(), src.size(), pact::loader::kPtrHost, &smh); r != 0) return fail("regMr", r);
  if (int r = p->regMr(sc, src.data(), src.size(), pact::loader::kPtrHost, &smh2); r != 0) return fail("regMr", r);
  if (int r = p->regMr(rc, dst.data(), dst.size(), pact::loader::kPtrHost, &rmh); r != 0) return fail("regMr", r);
  const char* metrics = std::getenv("PROBE_METRICS_WRITE");
  auto writeMetrics = [&](const char* suffix) {
    auto write = reinterpret_cast<pact_plugin_metrics_write_fn>(p->symbol("pact_plugin_metrics_write"));
    return write != nullptr && write((std::string(metrics) + suffix).c_str()) == 0;
  };
  void *rreq = nullptr, *sreq = nullptr;
  void* data[1] = {dst.data()};
  size_t sizes[1] = {dst.size()};
  int tags[1] = {1};
  void* mhs[1] = {rmh};
  while (rreq == nullptr && std::chrono::steady_clock::now() < deadline)
    if (int r = p->irecv(rc, 1, data, sizes, tags, mhs, &rreq); r != 0) return fail("irecv", r);
  while (sreq == nullptr && std::chrono::steady_clock::now() < deadline)
    if (int r = p->isend(sc, src.data(), src.size(), 1, smh, &sreq); r != 0) return fail("isend", r);
  if (metrics != nullptr && !writeMetrics(".posted")) return fail("pact_plugin_metrics_write", -1);
  for (int sdone = 0, rdone = 0, got[1]; !(sdone && rdone);) {
    if (std::chrono::steady_clock::now() > deadline) return fail("test (timed out)", -1);
    if (!sdone)
      if (int r = p->test(sreq, &sdone, got); r != 0) return fail("test", r);
    if (!rdone)
      if (int r = p->test(rreq, &rdone, got); r != 0) return fail("test", r);
  }
  if (std::memcmp(src.data(), dst.data(), src.size()) != 0) return fail("the message's bytes", -1);
  if (metrics != nullptr && !writeMetrics(".open")) return fail("pact_plugin_metrics_write", -1);
  if (const char* path = std::getenv("PROBE_TRACE_WRITE")) {
    auto write = reinterpret_cast<pact_plugin_trace_write_fn>(p->symbol("pact_plugin_trace_write"));
    if (write == nullptr) return fail("dlsym pact_plugin_trace_write", -1);
    std::printf("pact_plugin_trace_write: %d\n", write(std::strcmp(path, "-") == 0 ? nullptr : path));
  }
  (void)p->deregMr(sc, smh);
  (void)p->deregMr(sc, smh2);
  if (int r = p->closeSend(sc); r != 0) return fail("closeSend", r);
  if (metrics != nullptr && !writeMetrics(".closed")) return fail("pact_plugin_metrics_write", -1);
  p.release();  // exit with the receive comm open (and the plugin loaded): PACT_DIAG's exit lines
  return 0;
}
