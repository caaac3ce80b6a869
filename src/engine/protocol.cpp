// The protocol facade's dispatch: to the receiver or the sender by a control message's kind, by
// a timer's kind, and by each transfer's role when a peer is lost, a rail taken out, a transfer
// released or every transfer aborted.
#include "engine/protocol.h"

#include <variant>

#include "common/log.h"

namespace pact::engine {

Protocol::Protocol(const ProtocolConfig& config, Link& link)
    : table_(config), receiver_(table_, link), sender_(table_, link) {
  table_.attach(receiver_, sender_);
}

void Protocol::peerReady(uint64_t id, const std::string& name) {
  table_.view(id).name = name;
  receiver_.peerReady(id);
}

void Protocol::markGroupChunk(uint64_t xfer, uint64_t source) {
  Transfer& x = table_.at(xfer);
  x.groupChunk = true;
  if (x.role != Role::kReceiver) return;
  x.source = source;
  if (const auto* p = table_.known(source); p != nullptr && p->lost)
    receiver_.abort(x, Event::kFatalError, Status::kRemoteError, Reason::kPeerLost);
}

void Protocol::peerLost(uint64_t id, Status status) {
  // Its transfers, and the group chunks still expected from it (not yet offered: peer is 0).
  const auto fromLost = [&](const Transfer& x) { return x.peer == id || (x.peer == 0 && x.source == id); };
  table_.forEachLive(fromLost, [&](Transfer& x) {
    if (x.role == Role::kReceiver) {
      receiver_.abort(x, Event::kFatalError, status, Reason::kPeerLost);
    } else {
      table_.settle(x, Event::kFatalError, status);
    }
  });
  receiver_.peerLost(id);
  table_.markLost(id);  // its credit view stays readable
}

void Protocol::railOut(uint64_t id) {
  table_.forEachLive([&](const Transfer& x) { return x.peer == id; }, [&](Transfer& x) {
    if (x.role == Role::kSender) {
      sender_.railOut(x);
    } else {
      receiver_.railOut(x);
    }
  });
}

Result<CreditView> Protocol::peerCredit(uint64_t id) const {
  const TransferTable::PeerView* p = table_.known(id);
  if (p == nullptr) return Error{Status::kNotFound, "peer " + std::to_string(id) + ": unknown"};
  return CreditView{p->creditBudget, p->creditInUse};
}

void Protocol::onControl(uint64_t from, const Control& m) {
  if (table_.peer(from) == nullptr) return;  // from a connection already lost
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Offer>) receiver_.onOffer(from, msg);
        else if constexpr (std::is_same_v<T, Done>) receiver_.onDone(from, msg);
        else if constexpr (std::is_same_v<T, Advertise>) sender_.onAdvertise(from, msg);
        else if constexpr (std::is_same_v<T, Verdict>) sender_.onVerdict(from, msg);
        else if constexpr (std::is_same_v<T, EpochChange>) sender_.onEpochChange(from, msg);
        else if constexpr (std::is_same_v<T, Cancel>) receiver_.onCancel(from, msg);
        else if constexpr (std::is_same_v<T, CreditUpdate>) sender_.onCreditUpdate(from, msg);
        else PACT_WARN("engine %s: unexpected handshake message from %s", table_.config().name.c_str(),
                       table_.view(from).name.c_str());
      },
      m);
}

void Protocol::onEager(uint64_t from, const Offer& m, const uint8_t* data, size_t length) {
  if (table_.peer(from) == nullptr) return;
  if (data != nullptr && length != m.bytes) {
    PACT_WARN("engine %s: eager offer %s from %s carries %zu bytes, says %lu: bytes dropped",
              table_.config().name.c_str(), keyText(m.key).c_str(), table_.view(from).name.c_str(), length,
              static_cast<unsigned long>(m.bytes));
    data = nullptr;  // the offer stands; the bytes come again as pieces
  }
  receiver_.onOffer(from, m, data);
}

void Protocol::abortAll() {
  table_.forEachLive([](const Transfer&) { return true; }, [&](Transfer& x) {
    if (x.role == Role::kReceiver) {
      receiver_.abort(x, Event::kFatalError, Status::kRemoteError, Reason::kShutdown);
    } else {
      sender_.withdraw(x, Status::kRemoteError, false);
    }
  });
}

int Protocol::fireTimers() {
  using TimerKind = TransferTable::TimerKind;
  return table_.popDue([&](const TransferTable::Timer& timer) {
    if (timer.kind == TimerKind::kOffer) return receiver_.expireOffer(timer.id);
    Transfer* found = table_.find(timer.id);
    if (found == nullptr || !found->live()) return false;
    Transfer& x = *found;
    // A grace or resend timer of an earlier attempt: that attempt is over.
    if (timer.kind != TimerKind::kDeadline && timer.attempt != x.attempt) return false;
    if (timer.kind == TimerKind::kDeadline) {
      if (x.role == Role::kReceiver) {
        receiver_.abort(x, Event::kDeadline, Status::kDeadline, Reason::kDeadline);
      } else {
        table_.settle(x, Event::kDeadline, Status::kDeadline);
      }
    } else if (timer.kind == TimerKind::kMissing) {
      receiver_.checkMissing(x);
    } else if (x.role == Role::kSender) {
      sender_.resendDue(x);
    }
    return true;
  });
}

// A released transfer stays queryable until it is final (then the engine frees it): so the
// application can wait for an aborted transfer's blocks to be free again.
Result<bool> Protocol::release(uint64_t xfer) {
  Transfer* x = table_.find(xfer);
  if (x == nullptr || x->userReleased)
    return Error{Status::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released"};
  x->userReleased = true;
  if (!x->live()) {
    table_.maybeFinish(*x);
  } else if (x->role == Role::kReceiver) {
    receiver_.release(*x);
  } else {
    sender_.withdraw(*x, Status::kCanceled, true);
  }
  return table_.find(xfer) == nullptr;
}

}  // namespace pact::engine
