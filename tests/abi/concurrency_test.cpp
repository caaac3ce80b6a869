// Case 12: NCCL's two plugin threads at once. In each process a "progress" thread runs the data
// path (isend/irecv/test) on one comm, while a "service" thread keeps registering and
// deregistering other buffers on that comm and sets up and closes a second connection
// (listen/accept/connect/close). Data must stay exact, nothing may crash or hang.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tests/abi/harness.h"

namespace pact::abi_test {
namespace {

constexpr int kMinMessages = 300;
constexpr int kMaxMessages = 100000;
constexpr int kSecondConnections = 3;
constexpr size_t kCapacity = 1 << 20;
constexpr size_t kEndProbe = 64;

size_t messageSize(int i) {
  static const size_t kMenu[] = {64, 4096, 65539, kCapacity};
  return kMenu[i % 4];
}
uint64_t seedOf(int i) { return 0xc0c0000 + static_cast<uint64_t>(i); }

// Service-thread registration churn: each round registers a few buffers on comm (one range
// twice, as NCCL does with shared buffers) and deregisters them all.
class Churn {
 public:
  Churn(NetPlugin& plugin, void* comm) : plugin_(plugin), comm_(comm) {
    for (size_t size : {size_t{4096}, size_t{1} << 20, size_t{8} << 20}) {
      bufs_.push_back(std::make_unique<HostBuffer>(size));
    }
  }
  void round() {
    std::vector<void*> handles;
    for (auto& b : bufs_) {
      void* mh = nullptr;
      ASSERT_EQ(plugin_.regMr(comm_, b->data(), b->size(), loader::kPtrHost, &mh),
                loader::kSuccess);
      handles.push_back(mh);
    }
    void* twice = nullptr;
    ASSERT_EQ(plugin_.regMr(comm_, bufs_[1]->data(), bufs_[1]->size(), loader::kPtrHost, &twice),
              loader::kSuccess);
    handles.push_back(twice);
    for (void* mh : handles) ASSERT_EQ(plugin_.deregMr(comm_, mh), loader::kSuccess);
    ++rounds_;
  }
  int rounds() const { return rounds_; }

 private:
  NetPlugin& plugin_;
  void* comm_;
  std::vector<std::unique_ptr<HostBuffer>> bufs_;
  int rounds_ = 0;
};

// Progress thread of the receiver: until the 0-byte end marker. Returns the message count.
void receiveAll(NetPlugin& plugin, void* comm, int* received) {
  HostBuffer buf(kCapacity);
  MemReg mr(plugin, comm, buf.data(), buf.size());
  ASSERT_TRUE(mr.ok());
  int badSizes = 0;
  struct Report {  // one summary line however the loop ends
    int* bad;
    int* received;
    ~Report() {
      if (*bad > 0)
        ADD_FAILURE() << *bad << " of " << *received << " messages had a wrong reported size";
    }
  } report{&badSizes, received};
  for (int i = 0; i < kMaxMessages; ++i) {
    Deadline deadline(kOpTimeout);
    void* data = buf.data();
    size_t cap = kCapacity;
    int tag = kTag;
    void* mh = mr.handle();
    void* req = nullptr;
    std::memset(buf.data(), kPoison, kEndProbe);  // every real message is at least this long
    ASSERT_NO_FATAL_FAILURE(postRecv(plugin, comm, 1, &data, &cap, &tag, &mh, deadline, &req));
    Completion c = expectComplete(plugin, req, deadline, "message " + std::to_string(i));
    ASSERT_TRUE(c.done);
    // The 0-byte end marker: identified by the untouched buffer, not only by the reported size,
    // so that a wrong size report is a failure here rather than an early end.
    if (c.sizes[0] == 0 && isPoison(buf.data(), kEndProbe)) return;
    if (c.sizes[0] != static_cast<int>(messageSize(i)) && badSizes++ == 0) {
      ADD_FAILURE() << "message " << i << " of " << messageSize(i)
                    << " bytes: test() reported size " << c.sizes[0]
                    << " (further wrong sizes are only counted)";
    }
    ASSERT_TRUE(matchesPattern(buf.data(), messageSize(i), seedOf(i))) << "message " << i;
    ++*received;
  }
}

// Progress thread of the sender: at least kMinMessages, and on until the service thread is done.
void sendAll(NetPlugin& plugin, void* comm, const std::atomic<bool>& serviceDone, int* sent) {
  HostBuffer buf(kCapacity);
  MemReg mr(plugin, comm, buf.data(), buf.size());
  ASSERT_TRUE(mr.ok());
  int i = 0;
  for (; i < kMaxMessages && (i < kMinMessages || !serviceDone.load()); ++i) {
    fillPattern(buf.data(), messageSize(i), seedOf(i));
    ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), messageSize(i), mr.handle()));
    *sent = i + 1;
  }
  ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), 0, mr.handle()));  // end marker
}

// Service thread: K second connections with registration churn around them.
void serviceAccept(NetPlugin& plugin, Channel& ch, Churn& churn) {
  for (int k = 0; k < kSecondConnections; ++k) {
    for (int r = 0; r < 5; ++r) ASSERT_NO_FATAL_FAILURE(churn.round());
    void* second = nullptr;
    ASSERT_NO_FATAL_FAILURE(acceptPeer(plugin, ch, &second));
    ASSERT_NO_FATAL_FAILURE(barrier(ch));
    EXPECT_EQ(plugin.closeRecv(second), loader::kSuccess) << "closeRecv of connection " << k;
  }
}

void serviceConnect(NetPlugin& plugin, Channel& ch, Churn& churn) {
  for (int k = 0; k < kSecondConnections; ++k) {
    for (int r = 0; r < 5; ++r) ASSERT_NO_FATAL_FAILURE(churn.round());
    void* second = nullptr;
    ASSERT_NO_FATAL_FAILURE(connectPeer(plugin, ch, &second));
    ASSERT_NO_FATAL_FAILURE(barrier(ch));
    EXPECT_EQ(plugin.closeSend(second), loader::kSuccess) << "closeSend of connection " << k;
  }
}

class Concurrency : public ::testing::TestWithParam<int> {};

TEST_P(Concurrency, ServiceThreadDuringDataPath) {
  runConnectedPair(
      GetParam(),
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        std::atomic<bool> dataDone{false};
        int received = 0;
        std::thread progress([&] {
          receiveAll(plugin, comm, &received);
          dataDone = true;
        });
        std::thread service([&] {
          Churn churn(plugin, comm);
          serviceAccept(plugin, *io.peer, churn);
          while (!dataDone.load() && !::testing::Test::HasFatalFailure()) churn.round();
          std::printf("[   INFO   ] receiver: %d registration rounds\n", churn.rounds());
        });
        progress.join();
        service.join();
        EXPECT_GE(received, kMinMessages);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        std::atomic<bool> serviceDone{false};
        std::atomic<bool> dataDone{false};
        int sent = 0;
        std::thread progress([&] {
          sendAll(plugin, comm, serviceDone, &sent);
          dataDone = true;
        });
        std::thread service([&] {
          Churn churn(plugin, comm);
          serviceConnect(plugin, *io.peer, churn);
          serviceDone = true;
          while (!dataDone.load() && !::testing::Test::HasFatalFailure()) churn.round();
          std::printf("[   INFO   ] sender: %d registration rounds\n", churn.rounds());
        });
        progress.join();
        service.join();
        std::printf("[   INFO   ] sender: %d messages while the service thread ran\n", sent);
      });
}

INSTANTIATE_TEST_SUITE_P(Versions, Concurrency,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

}  // namespace
}  // namespace pact::abi_test
