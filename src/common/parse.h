// Parsing helpers of the PACT_* registry and the profile grammar: a value parser per kind
// (value_type, parse(), allowed()), the shared unsigned/whitespace/duration helpers, and the
// process environment. A leaf: it depends on nothing of pact but Status and the log levels.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace pact {

using Microseconds = std::chrono::microseconds;

// ---- value parsers: value_type, parse(), allowed() -------------------------------------------
struct DeviceListParser {
  using value_type = std::vector<std::string>;
  static Result<value_type> parse(std::string_view s);
  static const char* allowed() { return "comma-separated device names, or 'all'"; }
};
struct U64Parser {
  using value_type = uint64_t;
  static Result<uint64_t> parse(std::string_view s);
  static const char* allowed() { return "an unsigned 64-bit integer"; }
};
template <int kMin, int kMax>
struct CountParser {
  using value_type = int;
  static Result<int> parse(std::string_view s);
  static std::string allowedText() {
    return "an integer from " + std::to_string(kMin) + " to " + std::to_string(kMax);
  }
  static const char* allowed() {
    static const std::string text = allowedText();
    return text.c_str();
  }
};
struct DurationParser {
  using value_type = Microseconds;
  static Result<Microseconds> parse(std::string_view s);
  static const char* allowed() { return "a duration with unit us, ms or s (e.g. 200ms)"; }
};
struct SizeParser {
  using value_type = uint64_t;
  static Result<uint64_t> parse(std::string_view s);
  static const char* allowed() { return "a size in bytes with optional K, M or G suffix"; }
};
struct TextParser {  // any text, white space trimmed
  using value_type = std::string;
  static Result<std::string> parse(std::string_view s);
  static const char* allowed() { return "a file name or path"; }
};
// Where the metrics endpoint listens: "PORT" (on 127.0.0.1), "IPV4:PORT" or "[IPV6]:PORT"; port 0
// lets the kernel choose (logged). The value is "HOST:PORT" ("[V6]:PORT"), or empty: off.
struct ListenAddressParser {
  using value_type = std::string;
  static Result<std::string> parse(std::string_view s);
  static const char* allowed() { return "empty, PORT, IPV4:PORT or [IPV6]:PORT (port 0..65535)"; }
};
// When a receive into GPU memory is flushed (iflush; docs/gpu.md).
enum class GpuFlush : uint8_t { kAuto, kAlways, kNever };
struct GpuFlushParser {
  using value_type = GpuFlush;
  static Result<GpuFlush> parse(std::string_view s);
  static const char* allowed() { return "auto, always or never"; }
};
const char* gpuFlushName(GpuFlush f);
struct LogLevelParser {
  using value_type = log::Level;
  static Result<log::Level> parse(std::string_view s);
  static const char* allowed() { return "none, error, warn, info, debug or trace"; }
};

// Shared by the integer parsers: full-string unsigned decimal, overflow-checked.
Result<uint64_t> parseUnsigned(std::string_view s);
// Shared by every value parser: s without leading and trailing white space.
std::string_view trimSpace(std::string_view s);
// A duration as the registry writes it: "0", "30s", "200ms", "500us".
std::string formatDuration(Microseconds v);

template <int kMin, int kMax>
Result<int> CountParser<kMin, kMax>::parse(std::string_view s) {
  auto v = parseUnsigned(s);
  if (!v.ok() || *v < static_cast<uint64_t>(kMin) || *v > static_cast<uint64_t>(kMax))
    return Error{Status::kInvalidArgument, allowedText()};
  return static_cast<int>(*v);
}

// Range-checked counts used in params.def (a macro argument cannot hold a template comma).
using RecvCountParser = CountParser<1, 8>;
using TraceEventsParser = CountParser<16, (1 << 24)>;
using TagSpacesParser = CountParser<1, (1 << 17) - 1>;  // net/tags.h: tag::kMaxIndex
using FlagParser = CountParser<0, 1>;  // off (0) or on (1)

// What every pact variable starts with.
inline constexpr std::string_view kPactPrefix = "PACT_";
// Environment snapshot: PACT_* name -> value.
using EnvMap = std::map<std::string, std::string>;
// All PACT_* variables of the process environment.
EnvMap processPactEnv();
// Whether a (non-PACT) variable such as UCX_NET_DEVICES is set in the process environment, and
// its value ("" when unset): the user's UCX_* settings win over pact's.
bool envIsSet(const char* name);
std::string envValue(const char* name);

}  // namespace pact
