// HeldLink (engine/held_link.h): while held, nothing reaches the link under it; release passes
// every held send on in the order asked, with what was asked; unheld, sends go straight through;
// a send made while the held ones go out (a failed piece settling its transfer) comes after them.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/held_link.h"

namespace pact::engine {
namespace {

// The link under the HeldLink: records each call as one line.
class RecordingLink final : public Link {
 public:
  std::vector<std::string> calls;
  std::function<void()> onPiece;  // run inside sendPiece (a send that leads to another)
  std::string reach(uint64_t, size_t) override { return {}; }
  void sendControl(uint64_t peer, const Control& m, int route) override {
    calls.push_back("control " + std::to_string(peer) + " " + std::to_string(m.index()) + " " +
                    std::to_string(route));
  }
  void sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src, uint64_t n,
                 uint64_t xfer, MemoryType) override {
    calls.push_back("piece " + std::to_string(peer) + " " + std::to_string(route) + " " +
                    std::to_string(h.offset) + " " + std::to_string(src != nullptr) + " " +
                    std::to_string(n) + " " + std::to_string(xfer));
    if (onPiece) std::exchange(onPiece, nullptr)();
  }
  void sendEager(uint64_t peer, size_t, const Offer& m, std::span<const Extent> src, uint64_t xfer) override {
    calls.push_back("eager " + std::to_string(peer) + " " + std::to_string(m.bytes) + " " +
                    std::to_string(src.size()) + " " + std::to_string(xfer));
  }
  void fetch(void*, uint8_t*, uint64_t n, uint64_t, uint32_t, MemoryType) override {
    calls.push_back("fetch " + std::to_string(n));
  }
};

TEST(HeldLink, HeldSendsWaitForTheReleaseAndKeepTheirOrder) {
  RecordingLink inner;
  HeldLink link(inner);
  const uint8_t bytes[16] = {};
  std::vector<Extent> blocks(2);
  link.hold();
  link.sendControl(7, Done{}, 2);  // Control index 1
  PieceHeader h;
  h.offset = 4096;
  link.sendPiece(7, 1, h, bytes, 16, 42, MemoryType::kHost);
  Offer o;
  o.bytes = 99;
  link.sendEager(8, 0, o, blocks, 43);
  link.fetch(nullptr, nullptr, 5, 42, 0, MemoryType::kHost);  // a fetch is never held
  EXPECT_EQ(inner.calls, std::vector<std::string>{"fetch 5"});
  link.release();
  EXPECT_EQ(inner.calls, (std::vector<std::string>{"fetch 5", "control 7 1 2", "piece 7 1 4096 1 16 42",
                                                   "eager 8 99 2 43"}));
  // Released: straight through.
  link.sendControl(9, Offer{}, -1);
  EXPECT_EQ(inner.calls.back(), "control 9 5 -1");  // Offer: index 5
}

TEST(HeldLink, ASendMadeWhileTheHeldOnesGoOutComesAfterThem) {
  RecordingLink inner;
  HeldLink link(inner);
  link.hold();
  link.sendPiece(1, 0, PieceHeader{}, nullptr, 8, 1, MemoryType::kHost);
  link.sendControl(1, Done{}, 0);
  inner.onPiece = [&] { link.sendControl(1, Cancel{}, -1); };  // the piece failed: its transfer cancels
  link.release();
  ASSERT_EQ(inner.calls.size(), 3u);
  EXPECT_EQ(inner.calls[0].rfind("piece", 0), 0u);
  EXPECT_EQ(inner.calls[1], "control 1 1 0");   // the held Done first
  EXPECT_EQ(inner.calls[2], "control 1 7 -1");  // then the Cancel
  link.hold();  // a second hold starts empty
  link.release();
  EXPECT_EQ(inner.calls.size(), 3u);
}

}  // namespace
}  // namespace pact::engine
