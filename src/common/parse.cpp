#include "common/parse.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>  // environ (g++ defines _GNU_SOURCE)

#include <cctype>
#include <cstdlib>

namespace pact {

std::string_view trimSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string formatDuration(Microseconds v) {
  const auto us = v.count();
  if (us == 0) return "0";
  if (us % 1000000 == 0) return std::to_string(us / 1000000) + "s";
  if (us % 1000 == 0) return std::to_string(us / 1000) + "ms";
  return std::to_string(us) + "us";
}

Result<uint64_t> parseUnsigned(std::string_view s) {
  s = trimSpace(s);
  if (s.empty()) return Error{Status::kInvalidArgument, "empty"};
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return Error{Status::kInvalidArgument, "not a number"};
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return Error{Status::kInvalidArgument, "out of range"};
    v = v * 10 + d;
  }
  return v;
}

Result<uint64_t> U64Parser::parse(std::string_view s) {
  auto v = parseUnsigned(s);
  if (!v.ok()) return Error{Status::kInvalidArgument, allowed()};
  return v;
}

Result<std::vector<std::string>> DeviceListParser::parse(std::string_view s) {
  std::vector<std::string> out;
  s = trimSpace(s);
  if (s.empty() || s == "all") return out;
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view tok = trimSpace(s.substr(0, comma));
    if (tok.empty()) return Error{Status::kInvalidArgument, "an empty device name in the list"};
    for (char c : tok)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
            c == ':'))
        return Error{Status::kInvalidArgument,
                     "device name '" + std::string(tok) + "' has a character outside [A-Za-z0-9_.:-]"};
    out.emplace_back(tok);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

Result<Microseconds> DurationParser::parse(std::string_view s) {
  s = trimSpace(s);
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  auto num = parseUnsigned(s.substr(0, i));
  std::string_view unit = s.substr(i);
  uint64_t mult = 0;
  if (unit == "us") mult = 1;
  else if (unit == "ms") mult = 1000;
  else if (unit == "s") mult = 1000000;
  if (!num.ok() || mult == 0 || *num > UINT64_MAX / mult / 2)
    return Error{Status::kInvalidArgument, allowed()};
  return Microseconds(static_cast<int64_t>(*num * mult));
}

Result<uint64_t> SizeParser::parse(std::string_view s) {
  s = trimSpace(s);
  uint64_t mult = 1;
  if (!s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      default: break;
    }
    if (mult != 1) s.remove_suffix(1);
  }
  auto num = parseUnsigned(s);
  if (!num.ok() || *num > UINT64_MAX / mult) return Error{Status::kInvalidArgument, allowed()};
  return *num * mult;
}

Result<log::Level> LogLevelParser::parse(std::string_view s) {
  s = trimSpace(s);
  for (int l = 0; l <= static_cast<int>(log::Level::kTrace); ++l) {
    auto level = static_cast<log::Level>(l);
    if (s == log::levelName(level)) return level;
  }
  return Error{Status::kInvalidArgument, allowed()};
}

Result<std::string> TextParser::parse(std::string_view s) { return std::string(trimSpace(s)); }

Result<std::string> ListenAddressParser::parse(std::string_view s) {
  s = trimSpace(s);
  if (s.empty()) return std::string();
  std::string host = "127.0.0.1";
  std::string_view port = s;
  const size_t colon = s.rfind(':');
  if (colon != std::string_view::npos) {
    std::string_view h = s.substr(0, colon);
    port = s.substr(colon + 1);
    const bool v6 = h.size() >= 2 && h.front() == '[' && h.back() == ']';
    if (v6) h = h.substr(1, h.size() - 2);
    unsigned char buf[sizeof(in6_addr)];
    const std::string hs(h);
    if (inet_pton(v6 ? AF_INET6 : AF_INET, hs.c_str(), buf) != 1)
      return Error{Status::kInvalidArgument, "'" + std::string(s.substr(0, colon)) + "': not a numeric " +
                                                 (v6 ? "IPv6" : "IPv4") + " address (expected " + allowed() + ")"};
    host = v6 ? "[" + hs + "]" : hs;
  }
  auto p = parseUnsigned(port);
  if (!p.ok() || *p > 65535)
    return Error{Status::kInvalidArgument, "'" + std::string(port) + "': not a port (expected " + allowed() + ")"};
  return host + ":" + std::to_string(*p);
}

Result<GpuFlush> GpuFlushParser::parse(std::string_view s) {
  s = trimSpace(s);
  for (GpuFlush f : {GpuFlush::kAuto, GpuFlush::kAlways, GpuFlush::kNever})
    if (s == gpuFlushName(f)) return f;
  return Error{Status::kInvalidArgument, allowed()};
}

const char* gpuFlushName(GpuFlush f) {
  switch (f) {
    case GpuFlush::kAuto: return "auto";
    case GpuFlush::kAlways: return "always";
    case GpuFlush::kNever: return "never";
  }
  return "?";
}

EnvMap processPactEnv() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.compare(0, kPactPrefix.size(), kPactPrefix) != 0) continue;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

bool envIsSet(const char* name) { return std::getenv(name) != nullptr; }

std::string envValue(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace pact
