// Case 6: multi-receive (n = min(maxRecvs, 8) tagged buffers in one irecv, sends posted in a
//         shuffled tag order) and the 0x1 "optional completion" hint of irecv.
// Case 7: back-pressure: isend without matching receives must eventually return a NULL request
//         (not an error), and everything completes once the receiver drains.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "tests/abi/harness.h"

namespace pact::abi_test {
namespace {

constexpr size_t kPartCapacity = 256 * 1024;

int tagOf(int part) { return 3 + 7 * part; }  // distinct, not contiguous, never kTag
size_t sizeOfTag(int tag) {
  static const size_t kMenu[] = {1, 4096, 65537, 200000, 0, 777, kPartCapacity, 12345};
  return kMenu[(tag / 7) % 8];
}
uint64_t seedOfTag(int tag) { return 0x7a9000 + static_cast<uint64_t>(tag); }

class MultiRecv : public ::testing::TestWithParam<int> {};

TEST_P(MultiRecv, TagsSelectBuffersAndHintIsNeverReturned) {
  runConnectedPair(
      GetParam(),
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        loader::Properties props;
        ASSERT_EQ(plugin.getProperties(0, &props), loader::kSuccess);
        const int n = std::min(props.maxRecvs, loader::kMaxRecvs);
        ASSERT_GE(n, 1);
        ASSERT_TRUE(io.peer->sendValue(n));
        const size_t stride = kPartCapacity + kGuard;
        HostBuffer buf(stride * (n + 2));
        std::memset(buf.data(), kPoison, buf.size());
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        void* data[loader::kMaxRecvs];
        size_t caps[loader::kMaxRecvs];
        int tags[loader::kMaxRecvs];
        void* mhs[loader::kMaxRecvs];
        for (int i = 0; i < n; ++i) {
          data[i] = buf.data() + stride * i;
          caps[i] = kPartCapacity;
          tags[i] = tagOf(i);
          mhs[i] = mr.handle();
        }
        Deadline deadline(kOpTimeout);
        void* req = nullptr;
        ASSERT_NO_FATAL_FAILURE(postRecv(plugin, comm, n, data, caps, tags, mhs, deadline, &req));
        Completion c =
            expectComplete(plugin, req, deadline, "multi-receive of " + std::to_string(n));
        ASSERT_TRUE(c.done);
        for (int i = 0; i < n; ++i) {
          const size_t want = sizeOfTag(tags[i]);
          SCOPED_TRACE("part " + std::to_string(i) + " tag " + std::to_string(tags[i]));
          EXPECT_EQ(c.sizes[i], static_cast<int>(want)) << "size reported for this part";
          EXPECT_TRUE(matchesPattern(data[i], want, seedOfTag(tags[i])));
          EXPECT_TRUE(isPoison(static_cast<char*>(data[i]) + want, stride - want));
        }
        // The 0x1 hint (NCCL's optional receive completion, n == 1): the plugin must always
        // overwrite *request with a real request or NULL ("retry").
        char* hinted = buf.data() + stride * n;
        void* hdata = hinted;
        size_t hcap = 1024;
        int htag = kTag;
        void* hmh = mr.handle();
        void* hreq = nullptr;
        for (;;) {
          hreq = reinterpret_cast<void*>(0x1);
          ASSERT_EQ(plugin.irecv(comm, 1, &hdata, &hcap, &htag, &hmh, &hreq), loader::kSuccess);
          ASSERT_NE(hreq, reinterpret_cast<void*>(0x1)) << "irecv left the 0x1 hint in *request";
          if (hreq != nullptr) break;
          ASSERT_FALSE(deadline.expired()) << "irecv with the hint kept returning NULL";
        }
        expectComplete(plugin, hreq, deadline, "hinted irecv");
        // A plain receive after it: the stream is still in order, and by the time this one has
        // completed the hinted message (sent before it) has landed.
        char* next = buf.data() + stride * (n + 1);
        ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, next, 4096, mr.handle(), 4096));
        EXPECT_TRUE(matchesPattern(next, 4096, 0x4e));
        EXPECT_TRUE(matchesPattern(hinted, 1024, 0x41)) << "the hinted message";
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        int n = 0;
        ASSERT_TRUE(io.peer->recvValue(&n, kOpTimeout));
        ASSERT_TRUE(n >= 1 && n <= loader::kMaxRecvs) << n;
        HostBuffer buf(kPartCapacity * (n + 2));
        std::vector<int> order(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), std::mt19937(12345));
        if (n > 1 && order.front() == 0) std::swap(order.front(), order.back());  // not in order
        for (int part = 0; part < n; ++part) {
          fillPattern(buf.data() + kPartCapacity * part, sizeOfTag(tagOf(part)),
                      seedOfTag(tagOf(part)));
        }
        char* hinted = buf.data() + kPartCapacity * n;
        char* next = buf.data() + kPartCapacity * (n + 1);
        fillPattern(hinted, 1024, 0x41);
        fillPattern(next, 4096, 0x4e);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        Deadline deadline(kOpTimeout);
        std::vector<void*> reqs;
        for (int part : order) {
          void* req = nullptr;
          ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, buf.data() + kPartCapacity * part,
                                           sizeOfTag(tagOf(part)), tagOf(part), mr.handle(),
                                           deadline, &req));
          reqs.push_back(req);
        }
        for (size_t i = 0; i < reqs.size(); ++i) {
          expectComplete(plugin, reqs[i], deadline,
                         "send " + std::to_string(i) + " of the multi-receive");
        }
        ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, hinted, 1024, mr.handle()));
        ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, next, 4096, mr.handle()));
      });
}

INSTANTIATE_TEST_SUITE_P(Versions, MultiRecv,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

// ---- back-pressure --------------------------------------------------------------------------

constexpr int kMaxPosts = 4096;
constexpr size_t kSmall = 1024;

uint64_t seedOfIndex(int i) { return 0xbac0000 + static_cast<uint64_t>(i); }

class Backpressure : public ::testing::TestWithParam<int> {};

TEST_P(Backpressure, IsendReturnsNullThenDrains) {
  runConnectedPair(
      GetParam(),
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        int posted = 0;
        ASSERT_TRUE(io.peer->recvValue(&posted, kOpTimeout * 2)) << "sender never reported";
        if (posted < 0) return;  // no back-pressure: the sender reports that failure
        ASSERT_GT(posted, 0);
        const int total = posted + 1;  // plus one send posted after the drain
        HostBuffer buf(kSmall * total);
        std::memset(buf.data(), kPoison, buf.size());
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        Deadline deadline(kOpTimeout * 2);
        std::deque<std::pair<int, void*>> pending;
        auto completeOldest = [&] {
          auto [i, req] = pending.front();
          pending.pop_front();
          Completion c =
              expectComplete(plugin, req, deadline, "drain receive " + std::to_string(i));
          EXPECT_EQ(c.sizes[0], static_cast<int>(kSmall)) << "message " << i;
          EXPECT_TRUE(matchesPattern(buf.data() + kSmall * i, kSmall, seedOfIndex(i)))
              << "message " << i;
        };
        for (int i = 0; i < total; ++i) {
          for (;;) {
            void* data = buf.data() + kSmall * i;
            size_t cap = kSmall;
            int tag = kTag;
            void* mh = mr.handle();
            void* req = nullptr;
            ASSERT_EQ(plugin.irecv(comm, 1, &data, &cap, &tag, &mh, &req), loader::kSuccess);
            if (req != nullptr) {
              pending.emplace_back(i, req);
              break;
            }
            ASSERT_FALSE(pending.empty()) << "irecv returned NULL with nothing outstanding";
            completeOldest();
          }
        }
        while (!pending.empty()) completeOldest();
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSmall * (kMaxPosts + 1));
        for (int i = 0; i <= kMaxPosts; ++i)
          fillPattern(buf.data() + kSmall * i, kSmall, seedOfIndex(i));
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        std::vector<void*> reqs;
        bool sawNull = false;
        while (static_cast<int>(reqs.size()) < kMaxPosts) {
          void* req = nullptr;
          int rc = plugin.isend(comm, buf.data() + kSmall * reqs.size(), kSmall, kTag, mr.handle(),
                                &req);
          ASSERT_EQ(rc, loader::kSuccess)
              << "isend " << reqs.size() << " returned an error, not NULL";
          if (req == nullptr) {
            sawNull = true;
            break;
          }
          reqs.push_back(req);
        }
        const int posted = static_cast<int>(reqs.size());
        std::printf("[   INFO   ] isend returned NULL after %d outstanding sends\n", posted);
        ASSERT_TRUE(io.peer->sendValue(sawNull ? posted : -1));  // unblock the receiver first
        ASSERT_TRUE(sawNull) << "no back-pressure (NULL request) after " << kMaxPosts << " isends";
        Deadline deadline(kOpTimeout * 2);
        for (int i = 0; i < posted; ++i) {
          expectComplete(plugin, reqs[i], deadline, "backlogged send " + std::to_string(i));
        }
        void* req = nullptr;
        ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, buf.data() + kSmall * posted, kSmall, kTag,
                                         mr.handle(), deadline, &req));
        expectComplete(plugin, req, deadline, "send after the drain");
      });
}

INSTANTIATE_TEST_SUITE_P(Versions, Backpressure,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

}  // namespace
}  // namespace pact::abi_test
