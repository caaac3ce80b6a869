// The handshake codec: round trips, and every malformed input refused with the field named.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <cstring>

#include "net/tags.h"
#include "transport/channel.h"
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
}

TEST(Handle, RefusesForeignWrongVersionAndBadFields) {
  uint8_t buf[kHandleSize] = {};
  auto d = decodeHandle(buf);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message, "handle.magic: not a pact handle (wrong plugin on the peer?)");

  ListenHandle h;
  h.family = AF_INET;
  h.port = 1;
  encodeHandle(h, buf);
  buf[4] = 7;  // version
  d = decodeHandle(buf);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status(), Status::kRefused);
  EXPECT_EQ(d.error().message, "handle.version: peer speaks wire version 7, this side 3");

  h.family = 99;
  encodeHandle(h, buf);
  EXPECT_EQ(decodeHandle(buf).error().message, "handle.family: 99 is not IPv4/IPv6");
  h.family = AF_INET6;
  h.port = 0;
  encodeHandle(h, buf);
  EXPECT_EQ(decodeHandle(buf).error().message, "handle.port: 0");
  EXPECT_EQ(decodeHandle(std::span<const uint8_t>(buf, 10)).error().message, "handle.addr: truncated");
}

TEST(Frames, HelloAcceptRefuseRoundTrip) {
  Hello hello{1, 2, 3, {9, 8, 7}};
  auto f = encode(hello);
  auto hdr = decodeHeader(f);
  ASSERT_TRUE(hdr.ok());
  EXPECT_EQ(hdr->type, FrameType::kHello);
  EXPECT_EQ(hdr->version, kVersion);
  EXPECT_EQ(hdr->length, f.size() - kHeaderSize);
  auto h = decodeHello(bodyOf(f));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->listenId, 1u);
  EXPECT_EQ(h->commId, 2u);
  EXPECT_EQ(h->epoch, 3u);
  EXPECT_EQ(h->workerAddress, (std::vector<uint8_t>{9, 8, 7}));

  auto a = decodeAccept(bodyOf(encode(Accept{77, 5, {{1}, {2, 3}}})));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->tagSpace, 77u);
  EXPECT_EQ(a->epoch, 5u);
  EXPECT_EQ(a->railAddresses, (std::vector<std::vector<uint8_t>>{{1}, {2, 3}}));
  EXPECT_EQ(decodeAccept(bodyOf(encode(Accept{77, 5, {}}))).error().message,
            "accept.rails: 0 outside 1..8");

  auto r = decodeRefuse(bodyOf(encode(Refuse{Field::kEpoch, 4, 6})));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->field, Field::kEpoch);
  EXPECT_EQ(r->expected, 4u);
  EXPECT_EQ(r->got, 6u);
  EXPECT_STREQ(fieldName(r->field), "epoch");

  auto bye = encodeBye();
  EXPECT_EQ(bye.size(), kHeaderSize);
  EXPECT_EQ(decodeHeader(bye)->type, FrameType::kBye);
}

TEST(Frames, EveryTruncationIsRefusedWithTheField) {
  auto body = bodyOf(encode(Hello{1, 2, 3, {9, 8, 7}}));
  for (size_t n = 0; n < body.size(); ++n) {
    auto h = decodeHello(std::span(body).first(n));
    ASSERT_FALSE(h.ok()) << n;
    EXPECT_NE(h.error().message.find("hello."), std::string::npos) << h.error().message;
  }
  EXPECT_EQ(decodeHello(std::span(body).first(3)).error().message, "hello.listen_id: truncated");
  EXPECT_EQ(decodeHello(std::span(body).first(25)).error().message, "hello.worker_address: truncated");
  EXPECT_EQ(decodeHello(std::span(body).first(30)).error().message, "hello.channel: truncated");
}

TEST(Frames, OversizedAndTrailingAndUnknownAreRefused) {
  auto f = encode(Hello{1, 2, 3, {9}});
  f[8] = 0xff;
  f[9] = 0xff;  // length 65535
  EXPECT_EQ(decodeHeader(f).error().message, "frame.length: 65535 exceeds 4096");
  f = encode(Hello{1, 2, 3, {9}});
  f[6] = 42;
  EXPECT_EQ(decodeHeader(f).error().message, "frame.type: unknown type 42");
  f[0] = 0;
  EXPECT_EQ(decodeHeader(f).error().message, "frame.magic: not a pact frame");

  auto body = bodyOf(encode(Accept{1, 2, {{3}}}));
  body.push_back(0);
  EXPECT_EQ(decodeAccept(body).error().message, "accept.body: 1 trailing bytes");
  auto empty = bodyOf(encode(Hello{1, 2, 3, {}}));
  EXPECT_EQ(decodeHello(empty).error().message, "hello.worker_address: length 0 outside 1..2048");
  std::vector<uint8_t> big(kMaxWorkerAddress + 1, 1);
  EXPECT_FALSE(decodeAccept(bodyOf(encode(Accept{1, 2, {big}}))).ok());
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
  EXPECT_EQ(make(1, 5, 1024, 0, false), make(1, 5, 0, 0, false));  // sequence wraps after 1024
  EXPECT_EQ(make(0xFFFF, -1, 0x3FF, net::tag::kMaxPieces - 1, true), ~0ull);
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

TEST(Frames, HelloCarriesTheSendersChannel) {
  Hello h{1, 2, 3, {4}};
  h.unordered = 1;
  h.lanes = 4;
  h.chunk = 65536;
  auto d = decodeHello(bodyOf(encode(h)));
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->unordered, 1);
  EXPECT_EQ(d->lanes, 4);
  EXPECT_EQ(d->chunk, 65536u);
  h.lanes = 17;
  EXPECT_EQ(decodeHello(bodyOf(encode(h))).error().message, "hello.lanes: 17 outside 1..16");
  h.lanes = 2;
  h.chunk = 5000;
  EXPECT_EQ(decodeHello(bodyOf(encode(h))).error().message,
            "hello.chunk: 5000 is not a power of two in [4096, 2^30]");
  h.unordered = 2;
  EXPECT_EQ(decodeHello(bodyOf(encode(h))).error().message, "hello.order: 2 is not 0 or 1");
}

TEST(Frames, AuthenticationFieldsRoundTrip) {
  Hello h{1, 2, 3, {9}};
  h.auth = 1;
  h.nonce[0] = 0xaa;
  auto hd = decodeHello(bodyOf(encode(h)));
  ASSERT_TRUE(hd.ok()) << hd.error().message;
  EXPECT_EQ(hd->auth, 1);
  EXPECT_EQ(hd->nonce, h.nonce);
  h.auth = 3;
  EXPECT_EQ(decodeHello(bodyOf(encode(h))).error().message, "hello.auth: expected 0 or 1, got 3");
  Accept a{7, 0, {{1, 2}}};
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
  auto a = decodeAbort(bodyOf(encode(Abort{"piece 3 lost after 4 attempts"})));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->reason, "piece 3 lost after 4 attempts");
  // The encoder cuts and cleans what it is given, so whatever it sends decodes.
  auto longOne = decodeAbort(bodyOf(encode(Abort{std::string(2000, 'x') + "\n"})));
  ASSERT_TRUE(longOne.ok()) << longOne.error().message;
  EXPECT_EQ(longOne->reason.size(), kMaxAbortReason);
  EXPECT_EQ(decodeAbort(bodyOf(encode(Abort{"a\tb"})))->reason, "a?b");
  EXPECT_EQ(decodeAbort(bodyOf(encode(Abort{""})))->reason, "?");
  // A peer's malformed frames are refused naming the field.
  std::vector<uint8_t> bad = {3, 0, 'a', 0x01, 'c'};
  EXPECT_EQ(decodeAbort(bad).error().message, "abort.reason: byte 1 is not printable ASCII");
  std::vector<uint8_t> empty = {0, 0};
  EXPECT_EQ(decodeAbort(empty).error().message, "abort.reason: length 0 outside 1..512");
  std::vector<uint8_t> trailing = {1, 0, 'a', 'b'};
  EXPECT_EQ(decodeAbort(trailing).error().message, "abort.body: 1 trailing bytes");
  std::vector<uint8_t> huge = {0x01, 0x02};
  EXPECT_EQ(decodeAbort(huge).error().message, "abort.reason: length 513 outside 1..512");
}

}  // namespace
}  // namespace pact::wire
