// libFuzzer target: the connection codec (handle, frame header, the session frames hello,
// accept, refuse, proof, bye, and the channel frames open, opened, open refused, close, abort,
// verdict) and a message's seal (transport/seal.h: every input is tried as one too).
// Any input must be either decoded or refused with a message; never a crash, leak or UB.
#include <cstring>

#include "tests/fuzz/fuzz_main.h"
#include "transport/seal.h"
#include "transport/wire.h"

using namespace pact::wire;

std::vector<std::vector<uint8_t>> pact::fuzz::seeds() {
  ListenHandle lh;
  lh.family = 2;
  lh.port = 4242;
  lh.listenId = 7;
  lh.process = 11;
  std::vector<uint8_t> handle(kHandleSize);
  encodeHandle(lh, handle.data());
  std::vector<uint8_t> seal;
  encodeSealHeader(1, true, 7, 3 << 20, 2, &seal);
  setCheck(&seal, 1, 0xfeed);
  return {encode(Hello{1, 2, 3, 1, {}}), encode(Accept{5, 6, {}, {}}),
          encode(Refuse{Field::kEpoch, 1, 2}), encodeBye(), handle,
          encode(Open{1, 2, encode(CommShape{1, 2, 1, 65536, Contract{1, 3, 200000, 0}, {ProbeAddress{4, {10, 0, 0, 1}, 7}}, 9, {ProbeAddress{4, {10, 0, 0, 1}, 8}}})}),
          encode(Opened{1, 2, encode(CommAccept{3, {{1, 2}, {3}}, Contract{1, 3, 200000, 1}, {ProbeAddress{4, {10, 0, 0, 2}, 7}}})}),
          encode(OpenRefused{1, {Field::kListenId, 0, 1}}), encode(Close{4}), encode(Abort{4, "x"}),
          encode(Verdict{4, 1, 9, VerdictKind::kResend, {0, 2}}), seal};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  (void)decodeHandle(in).ok();
  if (auto s = decodeSeal(in, 4095); s.ok()) {  // a seal that decodes encodes back to the same bytes
    std::vector<uint8_t> again;
    encodeSealHeader(s->verify, s->fenced, s->epoch, s->bytes, s->pieces, &again);
    for (uint32_t k = 0; k < s->pieces && s->verify != 0; ++k) setCheck(&again, k, s->check(k));
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  auto hdr = decodeHeader(in);
  if (!hdr.ok() || size < kHeaderSize) return 0;
  auto body = in.subspan(kHeaderSize);
  if (body.size() != hdr->length) return 0;
  switch (hdr->type) {
    case FrameType::kHello: {
      auto m = decodeHello(body);
      if (m.ok()) {  // what decodes must encode back to the same bytes
        auto again = encode(*m);
        if (again.size() != size) __builtin_trap();
      }
      break;
    }
    case FrameType::kAccept: (void)decodeAccept(body).ok(); break;
    case FrameType::kOpen: {  // what decodes must encode back to the same bytes
      auto m = decodeOpen(body);
      if (m.ok() && encode(*m).size() != size) __builtin_trap();
      if (m.ok()) (void)decodeCommShape(m->payload).ok();
      break;
    }
    case FrameType::kOpened: {
      auto m = decodeOpened(body);
      if (m.ok()) (void)decodeCommAccept(m->payload).ok();
      break;
    }
    case FrameType::kOpenRefused: (void)decodeOpenRefused(body).ok(); break;
    case FrameType::kClose: (void)decodeClose(body).ok(); break;
    case FrameType::kRefuse: (void)decodeRefuse(body).ok(); break;
    case FrameType::kBye: break;
    case FrameType::kProof: (void)decodeProof(body).ok(); break;
    case FrameType::kAbort: {  // a reason that decodes encodes back to the same bytes
      auto m = decodeAbort(body);
      if (m.ok() && encode(*m).size() != size) __builtin_trap();
      break;
    }
    case FrameType::kVerdict: {  // a verdict that decodes encodes back to the same bytes
      auto m = decodeVerdict(body);
      if (m.ok()) {
        const auto again = encode(*m);  // the header's version is the decoder's caller's to judge
        if (again.size() != size || std::memcmp(again.data() + kHeaderSize, body.data(), body.size()) != 0)
          __builtin_trap();
      }
      break;
    }
  }
  return 0;
}
