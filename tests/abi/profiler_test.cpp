// NCCL's profiler (net v10+), driven by a RECORDING PROFILER DOUBLE in place of NCCL's callback:
// every isend and every receive buffer NCCL gives a handle gets one start (its handle slot NULL
// before the call, its parent the handle NCCL passed, pact's plugin id, a descriptor of comm,
// kind, buffer and size), and one update-and-stop of that same event when test reports the
// request done, carrying the bytes that moved, the result, and its pieces and lanes. Buffers
// without a handle get none. A profiler with net events off leaves the slot untouched: stop is
// still called, with the NULL it left.
#include <cstring>
#include <map>
#include <vector>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"

namespace pact::abi_test {
namespace {

constexpr int kStart = 0, kUpdateAndStop = 3;

struct Call {
  int type = -1;
  void* parent = nullptr;    // start: pHandle
  bool slotWasNull = false;  // start: *eHandle before the call
  void* event = nullptr;     // start: what the double wrote; stop: *eHandle as given
  int64_t pluginId = 0;
  pact_net_event_t desc{};
};

std::vector<Call> g_calls;
bool g_eventsOn = true;
char g_events[64];  // the double's event objects: their addresses are the handles

int recorder(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  Call c;
  c.type = type;
  c.pluginId = pluginId;
  if (extData != nullptr) std::memcpy(&c.desc, extData, sizeof c.desc);
  if (type == kStart) {
    c.parent = pHandle;
    c.slotWasNull = *eHandle == nullptr;
    if (g_eventsOn) *eHandle = &g_events[g_calls.size() % sizeof g_events];
    c.event = *eHandle;
  } else {
    c.event = *eHandle;
  }
  g_calls.push_back(c);
  return 0;
}

// Posts the receive (n buffers, their handles) and the sends, then tests both until done.
void exchange(NetPlugin& p, void* sc, void* rc, char* src, char* dst, void* smh, void* rmh,
              const std::vector<size_t>& sizes, const std::vector<void*>& sendParents,
              const std::vector<void*>& recvParents) {
  const int n = static_cast<int>(sizes.size());
  void* data[loader::kMaxRecvs];
  size_t caps[loader::kMaxRecvs];
  int tags[loader::kMaxRecvs];
  void* mhs[loader::kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    data[i] = dst + (i << 20);
    caps[i] = 1 << 20;
    tags[i] = 10 + i;
    mhs[i] = rmh;
  }
  Deadline deadline(kOpTimeout);
  void* rreq = nullptr;
  while (rreq == nullptr && !deadline.expired())
    ASSERT_EQ(p.irecv(rc, n, data, caps, tags, mhs, &rreq, recvParents.data()), loader::kSuccess);
  std::vector<void*> sreq(static_cast<size_t>(n), nullptr);
  for (int i = 0; i < n; ++i)
    while (sreq[static_cast<size_t>(i)] == nullptr && !deadline.expired())
      ASSERT_EQ(p.isend(sc, src + (i << 20), sizes[static_cast<size_t>(i)], 10 + i, smh,
                        &sreq[static_cast<size_t>(i)], sendParents[static_cast<size_t>(i)]),
                loader::kSuccess);
  int left = n + 1;
  std::vector<bool> done(static_cast<size_t>(n) + 1, false);
  while (left > 0 && !deadline.expired()) {
    for (int i = 0; i <= n; ++i) {
      if (done[static_cast<size_t>(i)]) continue;
      int d = 0, got[loader::kMaxRecvs];
      ASSERT_EQ(p.test(i == n ? rreq : sreq[static_cast<size_t>(i)], &d, got), loader::kSuccess);
      if (d) done[static_cast<size_t>(i)] = true, --left;
    }
  }
  ASSERT_EQ(left, 0) << "requests not done within " << kOpTimeout.count() << " ms";
}

class Profiler : public ::testing::TestWithParam<int> {};

TEST_P(Profiler, EveryHandledRequestIsOneStartAndOneStopOfTheSameEvent) {
  const int version = GetParam();
  runInChild("profiler events v" + std::to_string(version), [version] {
    auto plugin = openPlugin(version, -1, recorder);
    ASSERT_TRUE(plugin);
    void* sc = nullptr;
    void* rc = nullptr;
    ASSERT_NO_FATAL_FAILURE(connectLoopback(*plugin, 0, false, &sc, &rc));
    HostBuffer src(4 << 20), dst(4 << 20);
    std::memset(src.data(), 7, src.size());
    {
      MemReg smr(*plugin, sc, src.data(), src.size()), rmr(*plugin, rc, dst.data(), dst.size());
      ASSERT_TRUE(smr.ok() && rmr.ok());
      // Parents: NCCL's proxy steps, one per send and per receive buffer that has one.
      char steps[8];
      const std::vector<size_t> sizes = {8, 65536, 1 << 20};
      std::map<void*, std::pair<uint32_t, size_t>> want;  // parent -> kind, size
      std::vector<void*> sendParents, recvParents;
      for (size_t i = 0; i < sizes.size(); ++i) {
        sendParents.push_back(&steps[i]);
        want[&steps[i]] = {PACT_NET_EVENT_SEND, sizes[i]};
      }
      recvParents = {&steps[4], nullptr, &steps[6]};  // buffer 1 has no handle: no event
      want[&steps[4]] = {PACT_NET_EVENT_RECV, sizes[0]};
      want[&steps[6]] = {PACT_NET_EVENT_RECV, sizes[2]};
      ASSERT_NO_FATAL_FAILURE(exchange(*plugin, sc, rc, src.data(), dst.data(), smr.handle(),
                                       rmr.handle(), sizes, sendParents, recvParents));
      // A message with no handles at all: nothing is recorded for it.
      const size_t before = g_calls.size();
      ASSERT_NO_FATAL_FAILURE(exchange(*plugin, sc, rc, src.data(), dst.data(), smr.handle(),
                                       rmr.handle(), {100}, {nullptr}, {nullptr}));
      EXPECT_EQ(g_calls.size(), before) << "events for requests NCCL gave no handle";

      std::map<void*, const Call*> started;  // event -> its start
      std::map<void*, int> stops;
      for (const Call& c : g_calls) {
        EXPECT_EQ(c.pluginId, PACT_NET_PROFILER_ID);
        EXPECT_EQ(c.desc.struct_size, sizeof(pact_net_event_t));
        if (c.type == kStart) {
          EXPECT_TRUE(c.slotWasNull) << "the handle slot was not NULL before start";
          ASSERT_TRUE(want.count(c.parent)) << "start with a parent NCCL never passed";
          EXPECT_EQ(c.desc.kind, want[c.parent].first);
          EXPECT_EQ(c.desc.comm, reinterpret_cast<uintptr_t>(c.desc.kind == PACT_NET_EVENT_SEND ? sc : rc));
          EXPECT_EQ(c.desc.bytes, c.desc.kind == PACT_NET_EVENT_SEND ? want[c.parent].second : size_t{1} << 20)
              << "start: the posted size";
          EXPECT_TRUE(started.emplace(c.event, &c).second) << "one event started twice";
        } else {
          EXPECT_EQ(c.type, kUpdateAndStop);
          ASSERT_TRUE(started.count(c.event)) << "stop of an event never started";
          const Call& s = *started[c.event];
          EXPECT_EQ(++stops[c.event], 1) << "an event stopped twice";
          EXPECT_EQ(c.desc.kind, s.desc.kind);
          EXPECT_EQ(c.desc.buffer, s.desc.buffer);
          EXPECT_EQ(c.desc.result, 0);
          EXPECT_EQ(c.desc.bytes, want[s.parent].second) << "stop: the bytes that moved";
          EXPECT_GE(c.desc.pieces, 1u);
          EXPECT_GE(c.desc.lanes, 1u);
        }
      }
      EXPECT_EQ(started.size(), want.size()) << "one start per handled request buffer";
      EXPECT_EQ(stops.size(), want.size()) << "one stop per start";
      // Buffer 2 of the receive is the third of its request: its descriptor names it.
      for (const auto& [e, s] : started) {
        if (s->parent == &steps[6]) {
          EXPECT_EQ(s->desc.buffer, 2);
        }
      }

      // Net events off: the double leaves the slot alone; stop still comes, with that NULL.
      g_calls.clear();
      g_eventsOn = false;
      ASSERT_NO_FATAL_FAILURE(exchange(*plugin, sc, rc, src.data(), dst.data(), smr.handle(),
                                       rmr.handle(), {4096}, {&steps[0]}, {&steps[4]}));
      int startsOff = 0, stopsOff = 0;
      for (const Call& c : g_calls) {
        if (c.type == kStart) ++startsOff;
        if (c.type == kUpdateAndStop) {
          ++stopsOff;
          EXPECT_EQ(c.event, nullptr) << "stop got a handle the profiler never wrote";
        }
      }
      EXPECT_EQ(startsOff, 2);
      EXPECT_EQ(stopsOff, 2);
    }
    EXPECT_EQ(plugin->closeSend(sc), loader::kSuccess);
    EXPECT_EQ(plugin->closeRecv(rc), loader::kSuccess);
  });
}

INSTANTIATE_TEST_SUITE_P(V10Plus, Profiler, ::testing::Values(10, 11, 12), versionName);

}  // namespace
}  // namespace pact::abi_test
