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

  auto d = decode(encode(Done{{1, 2, 3, 4}, 2, 8192, Verify::kCrc32c, 0xdeadbeef, 0xfeedf00d12345678ull}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(std::get<Done>(*d).nonce, 0xfeedf00d12345678ull) << "a send's nonce (control version 6)";
  EXPECT_EQ(std::get<Done>(*d).attempt, 2u);
  EXPECT_EQ(std::get<Done>(*d).checksum, 0xdeadbeefu);
  EXPECT_EQ(std::get<Done>(*d).checksumKind, Verify::kCrc32c);

  auto v = decode(encode(Verdict{{1, 2, 3, 4}, Outcome::kAborted, Reason::kEpochMismatch, 5, 77}));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::get<Verdict>(*v).nonce, 77u);
  EXPECT_EQ(std::get<Verdict>(*v).attempt, 5u);
  EXPECT_EQ(std::get<Verdict>(*v).reason, Reason::kEpochMismatch);
  EXPECT_STREQ(reasonName(Reason::kEpochMismatch), "epoch mismatch");

  EXPECT_EQ(std::get<EpochChange>(*decode(encode(EpochChange{9}))).newEpoch, 9u);
  EXPECT_EQ(std::get<CreditUpdate>(*decode(encode(CreditUpdate{77}))).budgetBytes, 77u);
  EXPECT_TRUE(std::holds_alternative<Wired>(*decode(encode(Wired{}))));
  auto wired = encode(Wired{});
  wired.push_back(0);
  wired[8] = 1;  // a body where Wired has none
  EXPECT_EQ(decode(wired).error().message, "wired.body: 1 trailing bytes");
  EXPECT_EQ(std::get<Cancel>(*decode(encode(Cancel{{3, 4, 5, 6}}))).key, (TransferKey{3, 4, 5, 6}));
  EXPECT_STREQ(reasonName(Reason::kCanceled), "canceled by the application");
  auto o = decode(encode(Offer{{5, 6, 7, 8}, 4096, 1000}));
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(std::get<Offer>(*o).key, (TransferKey{5, 6, 7, 8}));
  EXPECT_EQ(std::get<Offer>(*o).bytes, 4096u);
  EXPECT_EQ(std::get<Offer>(*o).deadlineUs, 1000u);
  EXPECT_EQ(std::get<Offer>(*o).flags, 0u);
  auto eager = decode(encode(Offer{{5, 6, 7, 8}, 4096, 0, kOfferEager | kOfferRepeat,
                                   Verify::kXxh3, 0x1234567890abcdefull, 99}));
  ASSERT_TRUE(eager.ok()) << eager.error().message;
  EXPECT_EQ(std::get<Offer>(*eager).nonce, 99u);
  EXPECT_EQ(std::get<Offer>(*eager).flags, kOfferEager | kOfferRepeat);
  EXPECT_EQ(std::get<Offer>(*eager).checksumKind, Verify::kXxh3);
  EXPECT_EQ(std::get<Offer>(*eager).checksum, 0x1234567890abcdefull);
  EXPECT_TRUE(std::get<Cancel>(*decode(encode(Cancel{{3, 4, 5, 6}, true}))).answer);
  EXPECT_EQ(std::get<Cancel>(*decode(encode(Cancel{{3, 4, 5, 6}, true, 88}))).nonce, 88u);
  EXPECT_TRUE(std::get<Cancel>(*decode(encode(Cancel{{3, 4, 5, 6}, false, 88, true}))).closing);
  auto h = decode(encode(Hello{"decode-3", 42, 7, {1, 2, 3, 4}}));
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(std::get<Hello>(*h).name, "decode-3");
  EXPECT_EQ(std::get<Hello>(*h).token, 42u);
  EXPECT_EQ(std::get<Hello>(*h).workerAddress, (std::vector<uint8_t>{1, 2, 3, 4}));
  // Rail failover: the engine's probe addresses ride its Hello (control version 5).
  wire::ProbeAddress probe{4, {10, 77, 1, 2}, 40123};
  auto hp = decode(encode(Hello{"rails", 1, 0, {1}, {}, {probe, probe}}));
  ASSERT_TRUE(hp.ok()) << hp.error().message;
  EXPECT_EQ(std::get<Hello>(*hp).probes, (std::vector<wire::ProbeAddress>{probe, probe}));
  probe.family = 5;
  EXPECT_EQ(decode(encode(Hello{"rails", 1, 0, {1}, {}, {probe}})).error().message,
            "hello.probe_family: 5 is not 0, 4 or 6");
  EXPECT_EQ(decode(encode(Hello{"", 1, 0, {1}})).error().message,
            "hello.name: length 0 outside 1..256");
  EXPECT_EQ(decode(encode(Hello{"x", 1, 0, {}})).error().message,
            "hello.worker_address: length 0 outside 1..4096");
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
  a.rkey.clear();  // no remote key: the receiver mediates every write
  EXPECT_TRUE(decode(encode(a)).ok());
  a.rkey.assign(kMaxRkey + 1, 0);
  EXPECT_EQ(decode(encode(a)).error().message, "advertise.rkey: length 1025 outside 0..1024");
}

TEST(Control, HeaderAndEnumFieldsAreChecked) {
  auto f = encode(EpochChange{1});
  auto bad = f;
  bad[0] ^= 1;
  EXPECT_EQ(decode(bad).error().message, "control.magic: not a pact control frame");
  bad = f;
  bad[4] = 1;  // an engine of wire version 1 (before Hello listed contexts)
  EXPECT_EQ(decode(bad).status(), Status::kRefused);
  EXPECT_EQ(decode(bad).error().message, "control.version: peer speaks 1, this side 7");
  bad = f;
  bad[6] = 11;  // the first type past kWired (10)
  EXPECT_EQ(decode(bad).error().message, "control.type: unknown type 11");
  bad = f;
  bad.push_back(0);
  EXPECT_EQ(decode(bad).error().message, "control.length: says 8 bytes, frame has 9");
  bad = f;
  bad[10] = 0x7f;  // length far beyond the limit
  EXPECT_NE(decode(bad).error().message.find("control.length:"), std::string::npos);

  auto v = encode(Verdict{{1, 2, 3, 4}, Outcome::kCommitted, Reason::kNone});
  v[kControlHeader + 28] = 4;  // outcome
  EXPECT_EQ(decode(v).error().message, "verdict.outcome: unknown outcome 4");
  v[kControlHeader + 28] = 1;
  v[kControlHeader + 29] = 13;  // reason: the first past kCanceled (12)
  EXPECT_EQ(decode(v).error().message, "verdict.reason: unknown reason 13");
  auto d = encode(Done{{1, 2, 3, 4}, 0, 1, Verify::kNone, 0});
  d[kControlHeader + 40] = 7;  // checksum kind
  EXPECT_EQ(decode(d).error().message, "done.checksum_kind: unknown kind 7");
  auto o = encode(Offer{{1, 2, 3, 4}, 1, 0});
  o[kControlHeader + 44] = 4;  // flags: the first unknown bit
  EXPECT_EQ(decode(o).error().message, "offer.flags: unknown flags 4");
  o[kControlHeader + 44] = 0;
  o[kControlHeader + 45] = 3;  // checksum kind
  EXPECT_EQ(decode(o).error().message, "offer.checksum_kind: unknown kind 3");
  auto c = encode(Cancel{{1, 2, 3, 4}});
  c[kControlHeader + 28] = 2;
  EXPECT_EQ(decode(c).error().message, "cancel.answer: expected 0 or 1, got 2");
}

TEST(Control, PieceHeaderRoundTripsAndIsChecked) {
  uint8_t buf[kPieceHeaderSize];
  encodePiece(PieceHeader{9, {1, 2, 3, 4}, 5, 6, 4096}, buf);
  auto h = decodePiece(std::span<const uint8_t>(buf, kPieceHeaderSize));
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(h->token, 9u);
  EXPECT_EQ(h->key, (TransferKey{1, 2, 3, 4}));
  EXPECT_EQ(h->attempt, 5u);
  EXPECT_EQ(h->block, 6u);
  EXPECT_EQ(h->offset, 4096u);
  EXPECT_EQ(decodePiece(std::span<const uint8_t>(buf, kPieceHeaderSize - 1)).error().message,
            "piece.offset: truncated");
  buf[0] ^= 1;
  EXPECT_EQ(decodePiece(std::span<const uint8_t>(buf, kPieceHeaderSize)).error().message,
            "piece.magic: not a pact data piece");
}

}  // namespace
}  // namespace pact::engine
