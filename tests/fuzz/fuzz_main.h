// Shared by the libFuzzer targets: built with -DPACT_FUZZ_SEEDS (no libFuzzer), a target's
// main() writes its seed corpus, made by the real encoders, into the directory given; built with
// -fsanitize=fuzzer, libFuzzer provides main() and calls LLVMFuzzerTestOneInput.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace pact::fuzz {

// Implemented by each target: the seeds of its corpus.
std::vector<std::vector<uint8_t>> seeds();

}  // namespace pact::fuzz

#ifdef PACT_FUZZ_SEEDS
int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  int i = 0;
  for (const auto& s : pact::fuzz::seeds()) {
    std::string path = std::string(argv[1]) + "/seed-" + std::to_string(i++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return 1;
    std::fwrite(s.data(), 1, s.size(), f);
    std::fclose(f);
  }
  return 0;
}
#endif
