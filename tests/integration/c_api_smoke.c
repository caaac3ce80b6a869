/* The C API from C (not C++): the header compiles as C99 and the library links and runs. */
#include <pact/pact.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  pact_engine_config_t config;
  pact_engine_config_init(&config);
  config.name = "c-smoke";
  config.listen_ip = "127.0.0.1";
  pact_engine_t engine = NULL;
  if (pact_engine_create(&config, &engine) != PACT_OK) {
    fprintf(stderr, "engine_create: %s\n", pact_last_error());
    return 1;
  }
  char address[64];
  if (pact_engine_address(engine, address, sizeof address) != PACT_OK || strchr(address, ':') == NULL) {
    fprintf(stderr, "engine_address: %s\n", pact_last_error());
    return 1;
  }
  pact_peer_t self = 0;
  if (pact_connect(engine, address, 5000, &self) != PACT_OK) {
    fprintf(stderr, "connect to itself: %s\n", pact_last_error());
    return 1;
  }
  static char buffer[1 << 16];
  pact_mr_t mr = NULL;
  if (pact_mem_register(engine, buffer, sizeof buffer, &mr) != PACT_OK) return 1;
  pact_key_t key = {1, 2, 0, 0};
  pact_block_t dst = {mr, 0, 4096}, src = {mr, 8192, 4096};
  memset(buffer + 8192, 0x5a, 4096);
  pact_xfer_t rx = 0, tx = 0;
  if (pact_expect(engine, &key, &dst, 1, 0, NULL, &rx) != PACT_OK ||
      pact_send(engine, self, &key, &src, 1, 0, NULL, &tx) != PACT_OK) {
    fprintf(stderr, "expect/send: %s\n", pact_last_error());
    return 1;
  }
  pact_xfer_info_t info;
  if (pact_xfer_wait(engine, rx, 10000, &info) != PACT_OK || info.result != PACT_OK ||
      buffer[0] != 0x5a || buffer[4095] != 0x5a) {
    fprintf(stderr, "transfer to itself: %s (%s)\n", pact_status_string(info.result), pact_last_error());
    return 1;
  }
  (void)pact_xfer_wait(engine, tx, 10000, &info);
  (void)pact_xfer_release(engine, rx);
  (void)pact_xfer_release(engine, tx);
  if (pact_mem_deregister(engine, mr) != PACT_OK) return 1;
  pact_engine_destroy(engine);
  printf("C API: engine %s transferred 4096 bytes to itself\n", address);
  return 0;
}
