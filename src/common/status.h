// Status and Result: the error model of pact's core (see STYLE.md 3.4).
// One error model for both faces: Status 0 is success, 1 "in progress", negative values are
// errors; the C edges map it (plugin/nccl to ncclResult_t, src/api to pact_status_t). Result<T> carries a value or an
// Error (status + message naming what was wrong); Result<void> only the Error. Both are
// [[nodiscard]].
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace pact {

enum class [[nodiscard]] Status : int8_t {
  kOk = 0,
  kInProgress = 1,
  kInvalidArgument = -1,  // caller passed something malformed (env value, handle, size)
  kNoMemory = -2,
  kNoResource = -3,       // a fixed pool is exhausted
  kRemoteError = -4,      // the peer died, closed, or reported an error
  kSystemError = -5,      // a syscall failed
  kInternal = -6,         // a bug or an unexpected UCX failure
  kTimeout = -7,
  kRefused = -8,          // the peer refused the handshake (version, epoch, magic, auth)
  kTruncated = -9,        // message larger than the posted buffer
  kCanceled = -10,
  kUnsupported = -11,
  // Outcomes of engine transfers and calls (the C API maps each to its pact_status_t).
  kNotFound = -12,        // an unknown transfer, peer or registration
  kEpochMismatch = -13,   // the receiver is on another model epoch
  kChecksum = -14,        // the payload check failed and no retry was left
  kRejected = -15,        // the receiver's commit hook refused the block table
  kDeadline = -16,        // the transfer's deadline passed
  kDuplicate = -17,       // the same transfer is open or committed already
  kOutOfRange = -18,      // outside a registration or the advertised range
  kStale = -19,           // an older generation than the receiver expects
  kBusy = -20,            // in use (a registration with live transfers)
  kIncomplete = -21,      // pieces missing after the sender finished, no retry left
  kPeerStale = -22,       // the application declared the peer gone or restarted (disconnect)
};

const char* statusName(Status s);
inline bool ok(Status s) { return s == Status::kOk; }
inline bool isError(Status s) { return static_cast<int8_t>(s) < 0; }
inline void ignore(Status) {}

struct Error {
  Status status = Status::kInternal;
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error e) : v_(std::move(e)) {}      // NOLINT
  Result(Status s, std::string msg) : v_(Error{s, std::move(msg)}) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const { return std::get<Error>(v_); }
  Status status() const { return ok() ? Status::kOk : error().status; }
  void ignore() const {}

 private:
  std::variant<T, Error> v_;
};

// A call with nothing to return: success, or the Error naming what was wrong.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : error_(std::move(e)), failed_(true) {}  // NOLINT: implicit by design
  Result(Status s, std::string msg) : error_{s, std::move(msg)}, failed_(true) {}

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return error_; }
  Status status() const { return ok() ? Status::kOk : error_.status; }
  void ignore() const {}

 private:
  Error error_;
  bool failed_ = false;
};

}  // namespace pact
