// Logging: printf-style, level checked before the arguments are evaluated. One sink: NCCL's logger
// when the plugin was given one, stderr otherwise. The level comes from PACT_LOG_LEVEL (params).
#pragma once

#include <cstdarg>

namespace pact::log {

enum class Level : int { kNone = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4, kTrace = 5 };

// A sink receives one fully formatted line (no trailing newline).
using Sink = void (*)(Level level, const char* file, int line, const char* message);

void setLevel(Level level);
Level level();
// nullptr restores the stderr sink.
void setSink(Sink sink);
const char* levelName(Level level);

void write(Level level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

inline bool enabled(Level l) {
  extern int g_level;
  return static_cast<int>(l) <= g_level;
}

}  // namespace pact::log

#ifndef PACT_MAX_LOG_LEVEL
#define PACT_MAX_LOG_LEVEL 5
#endif

#define PACT_LOG_AT(lvl, ...)                                                          \
  do {                                                                                 \
    if (static_cast<int>(lvl) <= PACT_MAX_LOG_LEVEL && ::pact::log::enabled(lvl))      \
      [[unlikely]] ::pact::log::write(lvl, __FILE__, __LINE__, __VA_ARGS__);           \
  } while (0)

#define PACT_ERROR(...) PACT_LOG_AT(::pact::log::Level::kError, __VA_ARGS__)
#define PACT_WARN(...) PACT_LOG_AT(::pact::log::Level::kWarn, __VA_ARGS__)
#define PACT_INFO(...) PACT_LOG_AT(::pact::log::Level::kInfo, __VA_ARGS__)
#define PACT_DEBUG(...) PACT_LOG_AT(::pact::log::Level::kDebug, __VA_ARGS__)
#define PACT_TRACE(...) PACT_LOG_AT(::pact::log::Level::kTrace, __VA_ARGS__)
