// Data path between two processes (A receives, B sends), per ABI version.
// Case 3: sizes 0 B .. 64 MiB, byte-exact, nothing written after the message.
// Case 4: a receive buffer larger than the message reports the real size.
// Case 5: 64 messages of mixed sizes posted back-to-back arrive in order.
// Case 8: iflush on host memory succeeds with a NULL request.
#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "tests/abi/harness.h"

namespace pact::abi_test {
namespace {


std::vector<size_t> sweepSizes() {
  std::vector<size_t> sizes = {0, 4095, 65537, (size_t{3} << 20) + 7};
  for (int k = 0; k <= 26; ++k) sizes.push_back(size_t{1} << k);  // 1 B .. 64 MiB
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

uint64_t seedOf(size_t index, size_t size) { return (index << 40) ^ size ^ 0x5eed; }

class Transfer : public ::testing::TestWithParam<int> {};

TEST_P(Transfer, SizesAreByteExact) {
  const auto sizes = sweepSizes();
  const size_t largest = sizes.back();
  runConnectedPair(
      GetParam(),
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(largest + kGuard);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        for (size_t i = 0; i < sizes.size(); ++i) {
          const size_t n = sizes[i];
          SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(n) + " bytes");
          std::memset(buf.data(), kPoison, n + kGuard);
          ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), n, mr.handle(), n));
          ASSERT_TRUE(matchesPattern(buf.data(), n, seedOf(i, n)));
          ASSERT_TRUE(isPoison(buf.data() + n, kGuard)) << "written after the end of the message";
        }
      },
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(largest);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        for (size_t i = 0; i < sizes.size(); ++i) {
          fillPattern(buf.data(), sizes[i], seedOf(i, sizes[i]));
          ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), sizes[i], mr.handle()));
        }
      });
}

TEST_P(Transfer, LargerReceiveBufferReportsRealSize) {
  constexpr size_t kCapacity = 1 << 20;
  const std::vector<size_t> sizes = {0, 1, 100, 4097, 300000, kCapacity - 1, kCapacity};
  runConnectedPair(
      GetParam(),
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(kCapacity + kGuard);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        for (size_t i = 0; i < sizes.size(); ++i) {
          const size_t n = sizes[i];
          SCOPED_TRACE(std::to_string(n) + " bytes into a " + std::to_string(kCapacity) +
                       "-byte buffer");
          std::memset(buf.data(), kPoison, buf.size());
          ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), kCapacity, mr.handle(), n));
          EXPECT_TRUE(matchesPattern(buf.data(), n, seedOf(i, n)));
          EXPECT_TRUE(isPoison(buf.data() + n, buf.size() - n)) << "written past the received size";
        }
      },
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(kCapacity);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        for (size_t i = 0; i < sizes.size(); ++i) {
          fillPattern(buf.data(), sizes[i], seedOf(i, sizes[i]));
          ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), sizes[i], mr.handle()));
        }
      });
}

// ---- 64 back-to-back messages -------------------------------------------------------------

constexpr int kStreamCount = 64;

struct Slot {
  size_t offset, size, capacity;
};

std::vector<Slot> streamLayout(bool receiver) {
  static const size_t kMenu[] = {0, 1, 8, 63, 4096, 8191, 65536, 100003, 1 << 20, 3 << 20};
  std::vector<Slot> slots;
  size_t offset = 0;
  for (int i = 0; i < kStreamCount; ++i) {
    size_t size = kMenu[(i * 7) % 10] + static_cast<size_t>(i % 3);
    size_t capacity = receiver ? size + (i % 2 ? 0 : 777) : size;  // half exact, half larger
    slots.push_back({offset, size, capacity});
    offset += (capacity + kGuard + 4095) / 4096 * 4096;  // each slot followed by a guard
  }
  return slots;
}

size_t layoutBytes(const std::vector<Slot>& slots) {
  return (slots.back().offset + slots.back().capacity + kGuard + 4095) / 4096 * 4096;
}

// Posts kStreamCount operations back-to-back. When the plugin answers with a NULL request
// (back-pressure), the oldest outstanding request is completed first, as NCCL would.
void runStream(NetPlugin& plugin, bool receiver, void* comm, char* base, void* mh,
               const std::vector<Slot>& slots, std::vector<Completion>* results) {
  Deadline deadline(kOpTimeout * 2);
  std::deque<std::pair<int, void*>> pending;
  results->assign(slots.size(), Completion());
  auto completeOldest = [&] {
    auto [index, req] = pending.front();
    pending.pop_front();
    (*results)[index] =
        expectComplete(plugin, req, deadline, "stream message " + std::to_string(index));
  };
  for (int i = 0; i < kStreamCount; ++i) {
    void* data = base + slots[i].offset;
    for (;;) {
      void* req = nullptr;
      int rc;
      if (receiver) {
        size_t cap = slots[i].capacity;
        int tag = kTag;
        void* mhs = mh;
        rc = plugin.irecv(comm, 1, &data, &cap, &tag, &mhs, &req);
      } else {
        rc = plugin.isend(comm, data, slots[i].size, kTag, mh, &req);
      }
      ASSERT_EQ(rc, loader::kSuccess) << (receiver ? "irecv" : "isend") << " of message " << i;
      if (req != nullptr) {
        pending.emplace_back(i, req);
        break;
      }
      ASSERT_FALSE(pending.empty()) << "NULL request with nothing outstanding, message " << i;
      completeOldest();
    }
  }
  while (!pending.empty()) completeOldest();
}

TEST_P(Transfer, BackToBackMessagesArriveInOrder) {
  runConnectedPair(
      GetParam(),
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        const auto slots = streamLayout(true);
        HostBuffer buf(layoutBytes(slots));
        std::memset(buf.data(), kPoison, buf.size());
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        std::vector<Completion> results;
        ASSERT_NO_FATAL_FAILURE(
            runStream(plugin, true, comm, buf.data(), mr.handle(), slots, &results));
        for (int i = 0; i < kStreamCount; ++i) {
          const Slot& s = slots[i];
          SCOPED_TRACE("stream message " + std::to_string(i) + " of " + std::to_string(s.size) +
                       " bytes");
          EXPECT_EQ(results[i].sizes[0], static_cast<int>(s.size)) << "reported size";
          EXPECT_TRUE(matchesPattern(buf.data() + s.offset, s.size, seedOf(i, s.size)));
          EXPECT_TRUE(isPoison(buf.data() + s.offset + s.size, s.capacity - s.size + kGuard));
        }
      },
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        const auto slots = streamLayout(false);
        HostBuffer buf(layoutBytes(slots));
        for (int i = 0; i < kStreamCount; ++i) {
          fillPattern(buf.data() + slots[i].offset, slots[i].size, seedOf(i, slots[i].size));
        }
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        std::vector<Completion> results;
        ASSERT_NO_FATAL_FAILURE(
            runStream(plugin, false, comm, buf.data(), mr.handle(), slots, &results));
      });
}

TEST_P(Transfer, FlushOfHostMemoryIsANoop) {
  constexpr size_t kSize = 65536;
  runConnectedPair(
      GetParam(),
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), kSize, mr.handle(), kSize));
        EXPECT_TRUE(matchesPattern(buf.data(), kSize, 77));
        void* data = buf.data();
        int size = static_cast<int>(kSize);
        void* mh = mr.handle();
        void* req = nullptr;
        EXPECT_EQ(plugin.iflush(comm, 1, &data, &size, &mh, &req), loader::kSuccess) << "iflush";
        EXPECT_EQ(req, nullptr) << "iflush of host memory should need no request";
        if (req != nullptr) expectComplete(plugin, req, Deadline(kOpTimeout), "iflush request");
      },
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(kSize);
        fillPattern(buf.data(), kSize, 77);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_TRUE(mr.ok());
        ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), kSize, mr.handle()));
      });
}

INSTANTIATE_TEST_SUITE_P(Versions, Transfer,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

}  // namespace
}  // namespace pact::abi_test
