// The handshake codec: round trips, and every malformed input refused with the field named.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <cstring>

#include "net/tags.h"
#include "transport/channel.h"
#include "transport/seal.h"
#include "transport/wire.h"

namespace pact::wire {
namespace {

std::vector<uint8_t> bodyOf(const std::vector<uint8_t>& frame) {
  return {frame.begin() + kHeaderSize, frame.end()};
}

TEST(Handle, RoundTripFitsNcclHandle) {
  ListenHandle h;
  h.family = AF_INET;
  h.port = 4242;
  h.addr[0] = 127;
  h.addr[3] = 1;
  h.listenId = 0x1122334455667788ull;
  h.epoch = 9;
  h.process = 0xabcdef;
  uint8_t buf[kHandleSize];
  std::memset(buf, 0xee, sizeof buf);
  encodeHandle(h, buf);
  for (size_t i = kHandleAddressBytes; i < kHandleSize; ++i) EXPECT_EQ(buf[i], 0) << i;  // scratch zeroed
  auto d = decodeHandle(buf);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->family, AF_INET);
  EXPECT_EQ(d->port, 4242);
  EXPECT_EQ(d->addr[0], 127);
  EXPECT_EQ(d->addr[3], 1);
  EXPECT_EQ(d->listenId, h.listenId);
  EXPECT_EQ(d->epoch, 9u);
  EXPECT_EQ(d->process, 0xabcdefu);
}

TEST(Handle, RefusesForeignWrongVersionAndBadFields) {
  uint8_t buf[kHandleSize] = {};
  auto d = decodeHandle(buf);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message, "handle.magic: not a pact handle (wrong plugin on the peer?)");

  ListenHandle h;
  h.family = AF_INET;
  h.port = 1;
  h.process = 5;
  encodeHandle(h, buf);
  buf[4] = 7;  // version
  d = decodeHandle(buf);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status(), Status::kRefused);
  EXPECT_EQ(d.error().message, "handle.version: peer speaks wire version 7, this side 6");

  h.family = 99;
  encodeHandle(h, buf);
  EXPECT_EQ(decodeHandle(buf).error().message, "handle.family: 99 is not IPv4/IPv6");
  h.family = AF_INET6;
  h.port = 0;
  encodeHandle(h, buf);
  EXPECT_EQ(decodeHandle(buf).error().message, "handle.port: 0");
  h.port = 1;
  h.process = 0;
  encodeHandle(h, buf);
  EXPECT_EQ(decodeHandle(buf).error().message, "handle.process: 0");
  EXPECT_EQ(decodeHandle(std::span<const uint8_t>(buf, 10)).error().message, "handle.addr: truncated");
}

TEST(Frames, SessionFramesRoundTrip) {
  Hello hello{1, 2, 3, 1, {}};
  hello.nonce[5] = 9;
  auto f = encode(hello);
  auto hdr = decodeHeader(f);
  ASSERT_TRUE(hdr.ok());
  EXPECT_EQ(hdr->type, FrameType::kHello);
  EXPECT_EQ(hdr->version, kVersion);
  EXPECT_EQ(hdr->length, f.size() - kHeaderSize);
  auto h = decodeHello(bodyOf(f));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->process, 1u);
  EXPECT_EQ(h->epoch, 2u);
  EXPECT_EQ(h->listenId, 3u);
  EXPECT_EQ(h->auth, 1u);
  EXPECT_EQ(h->nonce[5], 9u);
  EXPECT_EQ(decodeHello(bodyOf(encode(Hello{0, 2, 3, 0, {}}))).error().message, "hello.process: 0");

  auto a = decodeAccept(bodyOf(encode(Accept{77, 5, {}, {}})));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->process, 77u);
  EXPECT_EQ(a->epoch, 5u);

  auto r = decodeRefuse(bodyOf(encode(Refuse{Field::kEpoch, 4, 6})));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->field, Field::kEpoch);
  EXPECT_EQ(r->expected, 4u);
  EXPECT_EQ(r->got, 6u);
  EXPECT_STREQ(fieldName(r->field), "epoch");
  EXPECT_STREQ(fieldName(Field::kCapacity), "capacity");

  auto bye = encodeBye();
  EXPECT_EQ(bye.size(), kHeaderSize);
  EXPECT_EQ(decodeHeader(bye)->type, FrameType::kBye);
}

// A refusal reads the same wherever it is reported: local and remote values from the reader's side.
TEST(Frames, ARefusalDescribesItselfFromEitherSide) {
  const Refuse epoch{Field::kEpoch, 4, 6};  // the refusing side has 4, it received 6
  EXPECT_EQ(describe(epoch, false), "epoch differs (local 4, remote 6)");
  EXPECT_EQ(describe(epoch, true), "epoch differs (local 6, remote 4)");
  EXPECT_EQ(describe(Refuse{Field::kListenId, 0, 7}, true), "listen id 7 is not listening (closed)");
  EXPECT_EQ(describe(Refuse{Field::kCapacity, 131071, 0}, true), "no capacity left (limit 131071)");
  EXPECT_EQ(describe(Refuse{Field::kVersion, kVersion, 0}, true),
            "the open was not readable at wire version " + std::to_string(kVersion));
}

TEST(Frames, ChannelFramesRoundTrip) {
  auto o = decodeOpen(bodyOf(encode(Open{0x100000002ull, 7, {1, 2, 3}})));
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->listenId, 0x100000002ull);
  EXPECT_EQ(o->channel, 7u);
  EXPECT_EQ(o->payload, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_TRUE(decodeOpen(bodyOf(encode(Open{0, 7, {}}))).ok()) << "listen id 0 and no payload";

  auto d = decodeOpened(bodyOf(encode(Opened{7, 9, {4}})));
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->channel, 7u);
  EXPECT_EQ(d->peerChannel, 9u);
  EXPECT_EQ(d->payload, (std::vector<uint8_t>{4}));
  EXPECT_EQ(decodeOpened(bodyOf(encode(Opened{7, 0, {}}))).error().message, "opened.channel: 0");

  auto rf = decodeOpenRefused(bodyOf(encode(OpenRefused{7, {Field::kListenId, 0, 3}})));
  ASSERT_TRUE(rf.ok());
  EXPECT_EQ(rf->channel, 7u);
  EXPECT_EQ(rf->why.field, Field::kListenId);
  EXPECT_EQ(rf->why.got, 3u);

  EXPECT_EQ(decodeClose(bodyOf(encode(Close{42})))->channel, 42u);
  auto ab = decodeAbort(bodyOf(encode(Abort{5, "too big"})));
  ASSERT_TRUE(ab.ok());
  EXPECT_EQ(ab->channel, 5u);
  EXPECT_EQ(ab->reason, "too big");
}

TEST(Frames, ThePluginsPayloadsRoundTripAndRefuseBadFields) {
  auto sh = decodeCommShape(encode(CommShape{1, 4, 2, 65536, {}, {}, 0, {}}));
  ASSERT_TRUE(sh.ok()) << sh.error().message;
  EXPECT_EQ(sh->unordered, 1u);
  EXPECT_EQ(sh->lanes, 4u);
  EXPECT_EQ(sh->rails, 2u);
  EXPECT_EQ(sh->chunk, 65536u);
  EXPECT_EQ(decodeCommShape(encode(CommShape{1, 2, 1, 5000, {}, {}, 0, {}})).error().message,
            "comm_shape.chunk: 5000 is not a power of two in [4096, 2^30]");
  EXPECT_EQ(decodeCommShape(encode(CommShape{0, 17, 1, 0, {}, {}, 0, {}})).error().message,
            "comm_shape.lanes: 17 outside 1..16");
  EXPECT_EQ(decodeCommShape(encode(CommShape{2, 1, 1, 0, {}, {}, 0, {}})).error().message,
            "comm_shape.order: 2 is not 0 or 1");
  EXPECT_EQ(decodeCommShape(encode(CommShape{0, 1, 9, 0, {}, {}, 0, {}})).error().message,
            "comm_shape.rails: 9 outside 1..8");
  auto shape = encode(CommShape{1, 2, 1, 4096, {}, {}, 0, {}});
  for (size_t n = 0; n < shape.size(); ++n)
    EXPECT_FALSE(decodeCommShape(std::span(shape).first(n)).ok()) << n;

  auto ac = decodeCommAccept(encode(CommAccept{0x2a0001, {{1}, {2, 3}}, {}, {}}));
  ASSERT_TRUE(ac.ok()) << ac.error().message;
  EXPECT_EQ(ac->tagSpace, 0x2a0001u);
  EXPECT_EQ(ac->railAddresses, (std::vector<std::vector<uint8_t>>{{1}, {2, 3}}));
  EXPECT_EQ(decodeCommAccept(encode(CommAccept{1, {}, {}, {}})).error().message,
            "comm_accept.rails: 0 outside 1..8");
  std::vector<uint8_t> big(kMaxWorkerAddress + 1, 1);
  EXPECT_FALSE(decodeCommAccept(encode(CommAccept{1, {big}, {}, {}})).ok());
  auto accept = encode(CommAccept{1, {{3}}, {}, {}});
  accept.push_back(0);
  EXPECT_EQ(decodeCommAccept(accept).error().message, "comm_accept.body: 1 trailing bytes");
}

// Rail failover: each side's rails' probe addresses ride the shape and the accept.
TEST(Frames, TheRailProbeAddressesRoundTripAndRefuseBadFields) {
  ProbeAddress v4{4, {10, 77, 1, 2}, 40123}, v6{6, {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 7};
  CommShape shape{1, 2, 2, 65536, {}, {v4, v6}, 0, {}};
  auto sh = decodeCommShape(encode(shape));
  ASSERT_TRUE(sh.ok()) << sh.error().message;
  EXPECT_EQ(sh->probes, (std::vector<ProbeAddress>{v4, v6}));
  auto ac = decodeCommAccept(encode(CommAccept{7, {{1}, {2}}, {}, {v6, v4}}));
  ASSERT_TRUE(ac.ok()) << ac.error().message;
  EXPECT_EQ(ac->probes, (std::vector<ProbeAddress>{v6, v4}));
  shape.probes = {ProbeAddress{5, {}, 1}};
  EXPECT_EQ(decodeCommShape(encode(shape)).error().message, "comm_shape.probe_family: 5 is not 0, 4 or 6");
  shape.probes = {ProbeAddress{4, {127, 0, 0, 1}, 0}};
  EXPECT_EQ(decodeCommShape(encode(shape)).error().message, "comm_shape.probe_port: 0");
  CommShape acked{1, 2, 2, 65536, {}, {v4}, 0x1234, {v6}};
  EXPECT_EQ(decodeCommShape(encode(acked))->ackSink, 0x1234u);
  EXPECT_EQ(decodeCommShape(encode(acked))->ackTo, std::vector<ProbeAddress>{v6});
  auto bytes = encode(CommShape{1, 2, 2, 65536, {}, {}, 0, {}});
  bytes[bytes.size() - 10] = 9;  // nine probe addresses (their count is before the ack sink and its list)
  EXPECT_EQ(decodeCommShape(bytes).error().message, "comm_shape.probes: 9 outside 0..8");
}

// The class contract rides the comm shape (the sender's class) and the accept (what the comm
// does); the verdict frame answers each message of a verified comm.
TEST(Frames, TheContractAndTheVerdictRoundTripAndRefuseBadFields) {
  CommShape shape{1, 2, 1, 65536, Contract{2, 3, 200000, 0}, {}, 0, {}};
  auto sh = decodeCommShape(encode(shape));
  ASSERT_TRUE(sh.ok()) << sh.error().message;
  EXPECT_EQ(sh->contract.verify, 2u);
  EXPECT_EQ(sh->contract.retries, 3u);
  EXPECT_EQ(sh->contract.timeoutUs, 200000u);
  auto ac = decodeCommAccept(encode(CommAccept{7, {{1}}, Contract{1, 0, 0, 1}, {}}));
  ASSERT_TRUE(ac.ok()) << ac.error().message;
  EXPECT_EQ(ac->contract.sealed, 1u);
  EXPECT_EQ(ac->contract.verify, 1u);
  shape.contract.verify = 3;
  EXPECT_EQ(decodeCommShape(encode(shape)).error().message, "comm_shape.verify: 3 is not 0, 1 or 2");
  shape.contract = Contract{0, 101, 0, 0};
  EXPECT_EQ(decodeCommShape(encode(shape)).error().message, "comm_shape.retries: 101 outside 0..100");
  shape.contract = Contract{0, 0, kMaxTimeoutUs + 1, 0};
  EXPECT_EQ(decodeCommShape(encode(shape)).error().message,
            "comm_shape.timeout_us: 3600000001 is more than an hour");
  EXPECT_EQ(decodeCommAccept(encode(CommAccept{7, {{1}}, Contract{0, 0, 0, 2}, {}})).error().message,
            "comm_accept.sealed: 2 is not 0 or 1");

  auto v = decodeVerdict(bodyOf(encode(Verdict{9, 1, 70000, VerdictKind::kResend, {3, 5}})));
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(v->channel, 9u);
  EXPECT_EQ(v->seq, 70000u);
  EXPECT_EQ(v->kind, VerdictKind::kResend);
  EXPECT_EQ(v->pieces, (std::vector<uint32_t>{3, 5}));
  auto ok = decodeVerdict(bodyOf(encode(Verdict{9, 1, 2, VerdictKind::kVerified, {}})));
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->pieces.empty());
  EXPECT_EQ(decodeVerdict(bodyOf(encode(Verdict{9, 1, 2, VerdictKind::kResend, {}}))).error().message,
            "verdict.pieces: 0 outside 1..512");
  auto body = bodyOf(encode(Verdict{9, 1, 2, VerdictKind::kResend, {4}}));
  body[16] = 7;  // kind
  EXPECT_EQ(decodeVerdict(body).error().message, "verdict.kind: 7 is not 0, 1 or 2");
  for (size_t n = 0; n + 1 < body.size(); ++n) EXPECT_FALSE(decodeVerdict(std::span(body).first(n)).ok()) << n;
}

TEST(Seal, RoundTripsAndNamesEachBadField) {
  std::vector<uint8_t> seal;
  encodeSealHeader(1, true, 42, 3 << 20, 3, &seal);
  ASSERT_EQ(seal.size(), sealSize(3, true));
  for (uint32_t k = 0; k < 3; ++k) setCheck(&seal, k, 0x1111111111111111ull * (k + 1));
  auto v = decodeSeal(seal, 4095);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_TRUE(v->fenced);
  EXPECT_EQ(v->epoch, 42u);
  EXPECT_EQ(v->bytes, 3u << 20);
  EXPECT_EQ(v->pieces, 3u);
  EXPECT_EQ(v->check(2), 0x3333333333333333ull);
  std::vector<uint8_t> plain;
  encodeSealHeader(0, false, 0, 8, 1, &plain);
  EXPECT_EQ(plain.size(), kSealHeader);
  EXPECT_FALSE(decodeSeal(plain, 4095)->fenced);
  auto bad = [&](size_t at, uint8_t value) {
    auto copy = seal;
    copy[at] = value;
    return decodeSeal(copy, 4095).error().message;
  };
  EXPECT_EQ(bad(0, 0), "seal.magic: not a seal");
  EXPECT_EQ(bad(4, 2), "seal.version: 2, this side speaks 1");
  EXPECT_EQ(bad(6, 3), "seal.verify: 3 is not 0, 1 or 2");
  EXPECT_EQ(bad(7, 6), "seal.flags: unknown bits 6");
  EXPECT_EQ(bad(24, 0), "seal.pieces: 0 outside 1..4095");
  EXPECT_EQ(bad(28, 1), "seal.reserved: 1 is not 0");
  EXPECT_EQ(decodeSeal(seal, 2).error().message, "seal.pieces: 3 outside 1..2");
  EXPECT_EQ(decodeSeal(std::span(seal).first(seal.size() - 1), 4095).error().message,
            "seal.length: 55 bytes for 3 piece(s), expected 56");
  for (size_t n = 0; n < kSealHeader; ++n) EXPECT_FALSE(decodeSeal(std::span(seal).first(n), 4095).ok()) << n;
}

TEST(Frames, EveryTruncationIsRefusedWithTheField) {
  auto body = bodyOf(encode(Open{1, 2, {5, 6}}));
  for (size_t n = 0; n < body.size(); ++n) {
    auto h = decodeOpen(std::span(body).first(n));
    ASSERT_FALSE(h.ok()) << n;
    EXPECT_NE(h.error().message.find("open."), std::string::npos) << h.error().message;
  }
  EXPECT_EQ(decodeOpen(std::span(body).first(3)).error().message, "open.listen_id: truncated");
  EXPECT_EQ(decodeOpen(std::span(body).first(17)).error().message, "open.payload: truncated");
  auto hello = bodyOf(encode(Hello{1, 2, 3, 0, {}}));
  EXPECT_EQ(decodeHello(std::span(hello).first(30)).error().message, "hello.nonce: truncated");
}

TEST(Frames, OversizedAndTrailingAndUnknownAreRefused) {
  auto f = encode(Hello{1, 2, 3, 0, {}});
  f[8] = 0xff;
  f[9] = 0xff;  // length 65535
  EXPECT_EQ(decodeHeader(f).error().message, "frame.length: 65535 exceeds 4096");
  f = encode(Hello{1, 2, 3, 0, {}});
  f[6] = 42;
  EXPECT_EQ(decodeHeader(f).error().message, "frame.type: unknown type 42");
  f[6] = 5;  // the engine's own frame before wire version 4
  EXPECT_EQ(decodeHeader(f).error().message, "frame.type: unknown type 5");
  f[0] = 0;
  EXPECT_EQ(decodeHeader(f).error().message, "frame.magic: not a pact frame");

  auto body = bodyOf(encode(Opened{1, 2, {3}}));
  body.push_back(0);
  EXPECT_EQ(decodeOpened(body).error().message, "opened.body: 1 trailing bytes");
  EXPECT_EQ(decodeOpen(bodyOf(encode(Open{1, 0, {}}))).error().message, "open.channel: 0");
  auto refuse = bodyOf(encode(Refuse{Field::kEpoch, 1, 2}));
  refuse[0] = 9;
  EXPECT_EQ(decodeRefuse(refuse).error().message, "refuse.field: unknown field 9");
}

TEST(TagLayout, SpaceTagSequenceAndPieceNeverCollide) {
  using net::tag::make;
  EXPECT_NE(make(1, 0, 0, 0, false), make(2, 0, 0, 0, false));
  EXPECT_NE(make(1, 0, 0, 0, false), make(1, 1, 0, 0, false));
  EXPECT_NE(make(1, 0, 0, 0, false), make(1, 0, 1, 0, false));
  EXPECT_NE(make(1, 0, 0, 0, false), make(1, 0, 0, 1, false));
  EXPECT_EQ(make(1, 5, 512, 0, false), make(1, 5, 0, 0, false));  // sequence wraps after 512
  EXPECT_EQ(make((1u << net::tag::kSpaceBits) - 1, -1, net::tag::kSeqMask, net::tag::kMaxPieces - 1, true),
            ~0ull);
  // The generation is part of the space: the same index of another generation never collides.
  EXPECT_NE(make(1, 0, 0, 0, false), make(1 | (1u << net::tag::kIndexBits), 0, 0, 0, false));
  // A receive (mask ignores `last`) matches the sender's last piece and learns it was the last.
  const uint64_t sent = make(7, 3, 9, 4, true);
  EXPECT_EQ(sent & net::tag::kRecvMask, make(7, 3, 9, 4, false));
  EXPECT_TRUE(net::tag::isLast(sent));
  EXPECT_FALSE(net::tag::isLast(make(7, 3, 9, 4, false)));
}

TEST(TagLayout, PiecesPerMessage) {
  EXPECT_EQ(transport::piecesFor(0, 4096), 1u);
  EXPECT_EQ(transport::piecesFor(1, 4096), 1u);
  EXPECT_EQ(transport::piecesFor(4096, 4096), 1u);
  EXPECT_EQ(transport::piecesFor(4097, 4096), 2u);
}

TEST(Frames, AuthenticationFieldsRoundTrip) {
  Hello h{1, 2, 3, 0, {}};
  h.auth = 1;
  h.nonce[0] = 0xaa;
  auto hd = decodeHello(bodyOf(encode(h)));
  ASSERT_TRUE(hd.ok()) << hd.error().message;
  EXPECT_EQ(hd->auth, 1);
  EXPECT_EQ(hd->nonce, h.nonce);
  h.auth = 3;
  EXPECT_EQ(decodeHello(bodyOf(encode(h))).error().message, "hello.auth: expected 0 or 1, got 3");
  Accept a{7, 0, {}, {}};
  a.nonce[5] = 1;
  a.mac[31] = 2;
  auto ad = decodeAccept(bodyOf(encode(a)));
  ASSERT_TRUE(ad.ok()) << ad.error().message;
  EXPECT_EQ(ad->nonce, a.nonce);
  EXPECT_EQ(ad->mac, a.mac);
  Proof p;
  p.mac[3] = 9;
  auto pd = decodeProof(bodyOf(encode(p)));
  ASSERT_TRUE(pd.ok()) << pd.error().message;
  EXPECT_EQ(pd->mac, p.mac);
  auto body = bodyOf(encode(p));
  EXPECT_EQ(decodeProof(std::span<const uint8_t>(body).first(31)).error().message,
            "proof.mac: truncated");
  auto r = decodeRefuse(bodyOf(encode(Refuse{Field::kAuth, 1, 0})));
  ASSERT_TRUE(r.ok());
  EXPECT_STREQ(fieldName(r->field), "authentication");
}

TEST(Frames, AbortCarriesAPrintableReasonOfBoundedLength) {
  auto a = decodeAbort(bodyOf(encode(Abort{1, "piece 3 lost after 4 attempts"})));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->reason, "piece 3 lost after 4 attempts");
  // The encoder cuts and cleans what it is given, so whatever it sends decodes.
  auto longOne = decodeAbort(bodyOf(encode(Abort{1, std::string(2000, 'x') + "\n"})));
  ASSERT_TRUE(longOne.ok()) << longOne.error().message;
  EXPECT_EQ(longOne->reason.size(), kMaxAbortReason);
  EXPECT_EQ(decodeAbort(bodyOf(encode(Abort{1, "a\tb"})))->reason, "a?b");
  EXPECT_EQ(decodeAbort(bodyOf(encode(Abort{1, ""})))->reason, "?");
  // A peer's malformed frames are refused naming the field.
  const std::vector<uint8_t> id(8, 0);  // the channel
  auto withId = [&](std::vector<uint8_t> rest) {
    rest.insert(rest.begin(), id.begin(), id.end());
    return rest;
  };
  std::vector<uint8_t> bad = withId({3, 0, 'a', 0x01, 'c'});
  EXPECT_EQ(decodeAbort(bad).error().message, "abort.reason: byte 1 is not printable ASCII");
  std::vector<uint8_t> empty = withId({0, 0});
  EXPECT_EQ(decodeAbort(empty).error().message, "abort.reason: length 0 outside 1..512");
  std::vector<uint8_t> trailing = withId({1, 0, 'a', 'b'});
  EXPECT_EQ(decodeAbort(trailing).error().message, "abort.body: 1 trailing bytes");
  std::vector<uint8_t> huge = withId({0x01, 0x02});
  EXPECT_EQ(decodeAbort(huge).error().message, "abort.reason: length 513 outside 1..512");
}

}  // namespace
}  // namespace pact::wire
