// The engine's control codec: round trips, and every malformed frame refused naming the field,
// including remote-supplied ranges outside the advertised region.
#include <gtest/gtest.h>

#include "engine/control.h"

#include <cstring>

namespace pact::engine {
namespace {

Advertise sampleAdvertise() {
  Advertise a;
  a.key = {11, 22, 33, 4};
  a.deadlineUs = 200000;
  a.creditBytes = 1 << 20;
  a.regionBase = 0x7f0000000000;
  a.regionLength = 8192;
  a.rkey = {1, 2, 3};
  a.blocks = {{0, 4096}, {4096, 4096}};
  return a;
}

TEST(Control, EveryMessageRoundTrips) {
  auto a = decode(encode(sampleAdvertise()));
  ASSERT_TRUE(a.ok()) << a.error().message;
  const auto& adv = std::get<Advertise>(*a);
  EXPECT_EQ(adv.key, (TransferKey{11, 22, 33, 4}));
  EXPECT_EQ(adv.regionLength, 8192u);
  EXPECT_EQ(adv.rkey, (std::vector<uint8_t>{1, 2, 3}));
  ASSERT_EQ(adv.blocks.size(), 2u);
  EXPECT_EQ(adv.blocks[1].offset, 4096u);

  auto d = decode(encode(Done{{1, 2, 3, 4}, 8192, Checksum::kCrc32c, 0xdeadbeef}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(std::get<Done>(*d).checksum, 0xdeadbeefu);
  EXPECT_EQ(std::get<Done>(*d).checksumKind, Checksum::kCrc32c);

  auto v = decode(encode(Verdict{{1, 2, 3, 4}, Outcome::kAborted, Reason::kEpochMismatch}));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::get<Verdict>(*v).reason, Reason::kEpochMismatch);
  EXPECT_STREQ(reasonName(Reason::kEpochMismatch), "epoch mismatch");

  EXPECT_EQ(std::get<EpochChange>(*decode(encode(EpochChange{9}))).newEpoch, 9u);
  EXPECT_EQ(std::get<CreditUpdate>(*decode(encode(CreditUpdate{77}))).budgetBytes, 77u);
}

TEST(Control, EveryTruncationIsRefused) {
  auto f = encode(sampleAdvertise());
  for (size_t n = 0; n < f.size(); ++n) {
    auto r = decode(std::span(f).first(n));
    EXPECT_FALSE(r.ok()) << n;
  }
  // With a consistent header but a short body the field is named.
  auto body = std::vector<uint8_t>(f.begin(), f.begin() + kControlHeader + 20);
  uint32_t len = 20;
  std::memcpy(body.data() + 8, &len, 4);
  EXPECT_EQ(decode(body).error().message, "advertise.model_epoch: truncated");
}

TEST(Control, BlocksOutsideTheRegionAreRefused) {
  Advertise a = sampleAdvertise();
  a.blocks = {{0, 4096}, {4096, 8192}};
  EXPECT_EQ(decode(encode(a)).error().message,
            "advertise.blocks[1]: offset 4096 + length 8192 exceeds the region (8192 bytes)");
  a.blocks = {{UINT64_MAX, 2}};
  EXPECT_NE(decode(encode(a)).error().message.find("exceeds the region"), std::string::npos);
  a.blocks = {};
  EXPECT_EQ(decode(encode(a)).error().message, "advertise.blocks: count 0 outside 1..65536");
  a = sampleAdvertise();
  a.regionBase = UINT64_MAX - 10;
  EXPECT_EQ(decode(encode(a)).error().message,
            "advertise.region_length: region wraps around the address space");
  a = sampleAdvertise();
  a.rkey.clear();
  EXPECT_EQ(decode(encode(a)).error().message, "advertise.rkey: length 0 outside 1..1024");
}

TEST(Control, HeaderAndEnumFieldsAreChecked) {
  auto f = encode(EpochChange{1});
  auto bad = f;
  bad[0] ^= 1;
  EXPECT_EQ(decode(bad).error().message, "control.magic: not a pact control frame");
  bad = f;
  bad[4] = 2;
  EXPECT_EQ(decode(bad).status(), Status::kRefused);
  EXPECT_EQ(decode(bad).error().message, "control.version: peer speaks 2, this side 1");
  bad = f;
  bad[6] = 9;
  EXPECT_EQ(decode(bad).error().message, "control.type: unknown type 9");
  bad = f;
  bad.push_back(0);
  EXPECT_EQ(decode(bad).error().message, "control.length: says 8 bytes, frame has 9");
  bad = f;
  bad[10] = 0x7f;  // length far beyond the limit
  EXPECT_NE(decode(bad).error().message.find("control.length:"), std::string::npos);

  auto v = encode(Verdict{{1, 2, 3, 4}, Outcome::kCommitted, Reason::kNone});
  v[kControlHeader + 28] = 3;  // outcome
  EXPECT_EQ(decode(v).error().message, "verdict.outcome: unknown outcome 3");
  auto d = encode(Done{{1, 2, 3, 4}, 1, Checksum::kNone, 0});
  d[kControlHeader + 36] = 7;  // checksum kind
  EXPECT_EQ(decode(d).error().message, "done.checksum_kind: unknown kind 7");
}

}  // namespace
}  // namespace pact::engine
