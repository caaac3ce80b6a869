/**
 * @file pact.h
 * pact transfer engine: C API (libpact.so, pkg-config "pact").
 *
 * Moves sets of blocks from a sender to a receiver under a key
 * (request_id, transfer_id, model_epoch, generation) with epoch-aware commit: the receiver's
 * commit hook sees a transfer only when every byte is in its memory, the key's epoch and
 * generation are current and the checksum (when the traffic class asks for one) matches.
 * docs/engine.md explains the protocol; ARCHITECTURE.md section 5 is the contract.
 *
 * Conventions for every call:
 *  - No call throws; every failure is a negative pact_status_t, and pact_last_error() returns a
 *    message naming what was wrong (thread-local; valid until the next failing call on the same
 *    thread).
 *  - Handles (pact_engine_t, pact_mr_t, pact_group_t) are owned by the caller from the call that
 *    returns them to the matching destroy/deregister call. Ids (pact_peer_t, pact_xfer_t) are
 *    plain numbers, 0 is never valid.
 *  - Every call is thread-safe (one engine lock). Calls marked "blocking" progress the engine
 *    themselves while they wait, up to their timeout; all others return without waiting.
 *  - The commit hook runs on the thread that progresses the engine (the engine's progress thread,
 *    or the caller of pact_progress / a blocking call) with the engine lock held: it must not
 *    call into the same engine.
 *  - Status codes are frozen: new codes may be added, values never change.
 */
#ifndef PACT_PACT_H
#define PACT_PACT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PACT_API_VERSION 1

/** A credit budget without a limit (pact_set_credit, pact_peer_credit). */
#define PACT_CREDIT_UNLIMITED UINT64_MAX

typedef enum pact_status {
  PACT_OK = 0,
  PACT_IN_PROGRESS = 1,           /**< not finished yet (query/wait with a timeout) */
  PACT_ERR_INVALID_ARG = -1,      /**< a malformed argument; the message names it */
  PACT_ERR_NO_MEMORY = -2,
  PACT_ERR_NOT_FOUND = -3,        /**< unknown transfer, peer or registration */
  PACT_ERR_TIMED_OUT = -4,        /**< a blocking call's timeout passed (the operation goes on) */
  PACT_ERR_EPOCH_MISMATCH = -5,   /**< the receiver is on another model epoch */
  PACT_ERR_PEER_LOST = -6,        /**< the peer died or closed */
  PACT_ERR_REFUSED = -7,          /**< the peer refused the connection (version, epoch, auth),
                                     nothing listens at the address, or the peer has no context
                                     for the transfer's class */
  PACT_ERR_CHECKSUM = -8,         /**< payload check failed and no retry was left */
  PACT_ERR_REJECTED = -9,         /**< the receiver's commit hook rejected the block table */
  PACT_ERR_DEADLINE = -10,        /**< the transfer's deadline passed */
  PACT_ERR_DUPLICATE = -11,       /**< the same (request, transfer, generation) is already known */
  PACT_ERR_OUT_OF_RANGE = -12,    /**< a block outside its registration or the advertised range */
  PACT_ERR_STALE = -13,           /**< an older generation than the receiver expects */
  PACT_ERR_BUSY = -14,            /**< the resource is in use (a registration with live transfers) */
  PACT_ERR_SYSTEM = -15,          /**< a system call failed */
  PACT_ERR_INTERNAL = -16,        /**< a bug or an unexpected UCX failure */
  PACT_ERR_INCOMPLETE = -17,      /**< data pieces missing after the sender finished, no retry left */
  PACT_ERR_CANCELED = -18,        /**< the other side's application released the transfer */
  PACT_ERR_UNSUPPORTED = -19,     /**< this host cannot do it (GPU memory without a driver or a
                                     CUDA-capable UCX); the message says what is missing */
  PACT_ERR_PEER_STALE = -20       /**< the application disconnected the peer as gone or restarted
                                     (pact_peer_disconnect; e.g. its metadata-store lease expired
                                     or it came back on a new epoch) */
} pact_status_t;

/** Constant name of a status ("PACT_ERR_DEADLINE"). */
const char* pact_status_string(pact_status_t status);
/** Message of the last failing call on this thread ("" when none). */
const char* pact_last_error(void);

typedef struct pact_engine* pact_engine_t;
typedef struct pact_mr* pact_mr_t;
typedef struct pact_group* pact_group_t;
typedef uint64_t pact_peer_t;
typedef uint64_t pact_xfer_t;

/* ---- engine lifecycle --------------------------------------------------------------------- */

typedef struct pact_engine_config {
  uint32_t struct_size;        /**< sizeof(pact_engine_config_t); set by pact_engine_config_init */
  const char* name;            /**< shown to peers and in logs; NULL = "pact-<pid>" */
  const char* listen_ip;       /**< accept connections here; NULL = none. An IPv4/IPv6 address, an
                                    interface ("eth0": its address) or a host name ("localhost").
                                    "0.0.0.0" / "::" accept on every address and publish (address,
                                    metadata) the engine's first device's address instead */
  uint16_t listen_port;        /**< 0 = chosen by the kernel */
  uint64_t model_epoch;        /**< the receiver's current epoch (pact_set_epoch changes it) */
  uint64_t credit_budget;      /**< bytes the receiver may have advertised at once; 0 = unlimited */
  int progress_thread;         /**< 1: an engine thread progresses (polling for PACT_PROGRESS_SPIN
                                  after the last event, then sleeping on the UCX event fd);
                                  0: the caller calls pact_progress */
} pact_engine_config_t;

void pact_engine_config_init(pact_engine_config_t* config);

/** Creates an engine: a UCX context/worker on the devices of PACT_NET_DEVICES, the listening
 * socket, and the progress thread when asked. Fails with a message naming a malformed PACT_*
 * variable or argument. */
pact_status_t pact_engine_create(const pact_engine_config_t* config, pact_engine_t* engine);
/** Aborts every transfer still open (peers see PACT_ERR_PEER_LOST), waits (bounded) until no
 * data operation targets application memory, closes every connection and frees everything.
 * Registrations still open are released, with a warning saying how many. */
void pact_engine_destroy(pact_engine_t engine);
/** "ip:port" other engines pass to pact_connect. PACT_ERR_NOT_FOUND when not listening. */
pact_status_t pact_engine_address(pact_engine_t engine, char* buffer, size_t length);
/** Progresses the engine once; when nothing happened and timeout_ms > 0, returns at once while
 * the engine is busy (PACT_PROGRESS_SPIN: the caller polls again), else sleeps up to timeout_ms
 * (or the next deadline): on the engine's event fds, or with a progress thread until that thread
 * sees an event. Returns PACT_OK. Blocking. */
pact_status_t pact_progress(pact_engine_t engine, int timeout_ms);

/* ---- peers -------------------------------------------------------------------------------- */

/** Connects to the engine listening at address ("ip:port"); the handshake exchanges names,
 * epochs and UCX addresses. Blocking up to timeout_ms. PACT_ERR_REFUSED: the handshake was
 * refused (the message names the field) or nothing listens at the address; PACT_ERR_PEER_LOST:
 * the connection was reset; PACT_ERR_TIMED_OUT: no handshake within timeout_ms. */
pact_status_t pact_connect(pact_engine_t engine, const char* address, int timeout_ms,
                           pact_peer_t* peer);
/** Waits for a peer (connected or accepted) with the given name. Blocking up to timeout_ms. */
pact_status_t pact_peer_wait(pact_engine_t engine, const char* name, int timeout_ms,
                             pact_peer_t* peer);
/** Sender's view of a receiver's credit: the budget it granted this engine (its per-sender share,
 * or the receiver's total budget, shared by all its senders, when it set no share;
 * PACT_CREDIT_UNLIMITED when unlimited) and the bytes of this engine's advertised, unfinished
 * transfers to it. */
pact_status_t pact_peer_credit(pact_engine_t engine, pact_peer_t peer, uint64_t* budget,
                               uint64_t* in_use);

/** Drops the connection to peer because the application knows it is gone or restarted (its
 * metadata-store lease expired, its entry names a new epoch): every open transfer with it ends
 * PACT_ERR_PEER_STALE, the peer is told (its transfers with this engine end PACT_ERR_PEER_LOST),
 * later calls naming the id fail PACT_ERR_PEER_LOST with the reason; connect again for a new id.
 * PACT_ERR_NOT_FOUND for an unknown id; an id already lost is left as it is (PACT_OK). */
pact_status_t pact_peer_disconnect(pact_engine_t engine, pact_peer_t peer, const char* reason);

/* ---- memory ------------------------------------------------------------------------------- */

/** Registers host memory [addr, addr + length) with UCX. Blocks of transfers name a registration
 * and an offset into it; ranges are checked before any data moves. */
pact_status_t pact_mem_register(pact_engine_t engine, void* addr, size_t length, pact_mr_t* mr);
/** Where registered memory lives. */
typedef enum pact_mem_type {
  PACT_MEM_HOST = 0,
  PACT_MEM_CUDA = 1  /**< device memory of the CUDA driver (cuMemAlloc, cudaMalloc) */
} pact_mem_type_t;

typedef struct pact_mem_desc {
  uint32_t struct_size;    /**< sizeof(pact_mem_desc_t); set by pact_mem_desc_init */
  void* addr;
  size_t length;           /**< > 0 */
  pact_mem_type_t type;    /**< PACT_MEM_HOST by default */
  int device;              /**< CUDA ordinal the memory must be on; -1 = whichever the driver says */
  int dmabuf_fd;           /**< -1 = none; else a dmabuf (or mappable) fd covering the range:
                                checked (open, mappable, dmabuf_offset + length inside it), never
                                kept, so the caller may close it when the call returns */
  uint64_t dmabuf_offset;  /**< where addr lies in the dmabuf */
} pact_mem_desc_t;

void pact_mem_desc_init(pact_mem_desc_t* desc);
/** Registers host or GPU memory (docs/gpu.md). CUDA memory needs the CUDA driver and a UCX that
 * lists the CUDA memory type (PACT_ERR_UNSUPPORTED otherwise, naming what is missing); the range
 * must lie inside one allocation on desc->device (PACT_ERR_INVALID_ARG /
 * PACT_ERR_OUT_OF_RANGE). Blocks in CUDA memory receive pieces straight from UCX; checksums
 * (verify) read them through a bounded host staging buffer. */
pact_status_t pact_mem_register_ex(pact_engine_t engine, const pact_mem_desc_t* desc, pact_mr_t* mr);
/** PACT_ERR_BUSY while an unreleased transfer uses the registration. NULL is accepted. */
pact_status_t pact_mem_deregister(pact_engine_t engine, pact_mr_t mr);

typedef struct pact_block {
  pact_mr_t mr;
  uint64_t offset;  /**< into the registration */
  uint64_t length;  /**< > 0 */
} pact_block_t;

typedef struct pact_key {
  uint64_t request_id;
  uint64_t transfer_id;
  uint64_t model_epoch;
  uint32_t generation;
} pact_key_t;

/* ---- transfers: receiver side ------------------------------------------------------------- */

/** Moves the receiver to a new model epoch: every open transfer of another epoch is aborted
 * (PACT_ERR_EPOCH_MISMATCH), remote access to its blocks is revoked before it is reported final,
 * and every peer is told. Later offers or expects of other epochs are refused. */
pact_status_t pact_set_epoch(pact_engine_t engine, uint64_t model_epoch);

/** Called once per transfer whose every block is in, with the current epoch and a matching
 * checksum. Return 0 to commit (the data is now the application's), nonzero to reject
 * (the transfer ends PACT_ERR_REJECTED; the sender is told). */
typedef int (*pact_commit_fn)(void* user, pact_xfer_t xfer, const pact_key_t* key,
                              pact_peer_t from, const pact_block_t* blocks, size_t count);
pact_status_t pact_set_commit_hook(pact_engine_t engine, pact_commit_fn hook, void* user);

/** Credit budget in bytes: peer 0 sets the engine's total, a peer id that peer's share.
 * PACT_CREDIT_UNLIMITED removes the limit (the default for both); 0 grants nothing (new
 * transfers wait). Lowering it never cancels what is advertised; new transfers wait until they
 * fit. Senders are told their grant. A transfer larger than its budget waits until the budget
 * grows or its deadline passes: without a deadline (and without a class timeout) it waits as long
 * as both engines live (the receiver logs once that it waits). When the application never sets a
 * budget, each class's `credits` bounds what one sender has staged in that class. */
pact_status_t pact_set_credit(pact_engine_t engine, pact_peer_t peer, uint64_t budget);

/** Expects the transfer key into blocks (the destination; each block inside its registration).
 * The transfer is advertised to the sender (credit granted, destination published) once the
 * sender's matching offer arrived and the bytes fit the credit budget. deadline_us: time budget
 * from now, 0 = the class default or none. traffic_class: NULL = "DEFAULT" (PACT_TC_*: verify,
 * timeout, retries, credits, and its context, lanes and piece size); DEFAULT, KV, A2A, CTRL or
 * CKPT in any case, anything else PACT_ERR_INVALID_ARG (pact_send alike). PACT_ERR_DUPLICATE when the
 * key is open or committed already; PACT_ERR_EPOCH_MISMATCH when key->model_epoch is not the
 * current epoch; PACT_ERR_STALE when a newer generation of (request_id, transfer_id) was
 * expected already. */
pact_status_t pact_expect(pact_engine_t engine, const pact_key_t* key, const pact_block_t* blocks,
                          size_t count, uint64_t deadline_us, const char* traffic_class,
                          pact_xfer_t* xfer);

/* ---- transfers: sender side --------------------------------------------------------------- */

/** Offers the transfer key to peer and, once advertised, sends blocks (the source, laid out in
 * order over the receiver's blocks; the total length must match). Retries within the class's
 * retry budget and the deadline. */
pact_status_t pact_send(pact_engine_t engine, pact_peer_t peer, const pact_key_t* key,
                        const pact_block_t* blocks, size_t count, uint64_t deadline_us,
                        const char* traffic_class, pact_xfer_t* xfer);

/* ---- transfers: both sides ---------------------------------------------------------------- */

typedef enum pact_state {
  PACT_STATE_ALLOCATED = 0,
  PACT_STATE_ADVERTISED = 1,
  PACT_STATE_POSTED = 2,
  PACT_STATE_IN_FLIGHT = 3,
  PACT_STATE_REMOTE_DONE = 4,
  PACT_STATE_VERIFIED = 5,
  PACT_STATE_COMMITTED = 6,
  PACT_STATE_RELEASED = 7,
  PACT_STATE_RETRYING = 8,
  PACT_STATE_ABORTED = 9
} pact_state_t;

typedef struct pact_xfer_info {
  pact_state_t state;
  pact_status_t result;   /**< PACT_OK when committed, PACT_IN_PROGRESS while open, else why */
  int final;              /**< 1: committed or aborted, and no data operation targets its blocks
                             any more (the blocks may be reused) */
  uint32_t retries;
  pact_key_t key;
  pact_peer_t peer;
  uint64_t bytes;
} pact_xfer_info_t;

pact_status_t pact_xfer_query(pact_engine_t engine, pact_xfer_t xfer, pact_xfer_info_t* info);
/** Blocking until the transfer is final or timeout_ms passed (PACT_ERR_TIMED_OUT; the transfer
 * goes on). PACT_OK means final, whatever the outcome: the outcome is info->result (PACT_OK
 * committed, else why not). */
pact_status_t pact_xfer_wait(pact_engine_t engine, pact_xfer_t xfer, int timeout_ms,
                             pact_xfer_info_t* info);
/** Ends the caller's interest: an open transfer is aborted first. PACT_OK: the transfer is gone
 * and its blocks are free. PACT_IN_PROGRESS: a UCX operation still touches its blocks;
 * pact_xfer_query/pact_xfer_wait keep working on the id until it is final (wait for that before
 * reusing the blocks). The id becomes invalid once final (the engine keeps what it needs until
 * then). The other side is told at once: a receiver's release ends the sender's transfer with
 * PACT_ERR_CANCELED (also when its offer comes after the release); a sender's release before its
 * Done left ends the receiver's with PACT_ERR_CANCELED and it is never committed. A sender's
 * release after its Done left withdraws nothing: the receiver may commit, and the sender's
 * transfer stays open (PACT_IN_PROGRESS) until the verdict settles it. */
pact_status_t pact_xfer_release(pact_engine_t engine, pact_xfer_t xfer);

/* ---- all-to-all groups -------------------------------------------------------------------- */

/** A group of ranks: peers[r] is the connection to rank r (peers[my_rank] is a connection to this
 * engine itself). group_id must be the same on every rank and unique among groups. Every peer id
 * is checked here: PACT_ERR_NOT_FOUND (unknown) or PACT_ERR_PEER_LOST names peers[r]. */
pact_status_t pact_group_create(pact_engine_t engine, uint64_t group_id, const pact_peer_t* peers,
                                size_t ranks, uint32_t my_rank, pact_group_t* group);
/** Starts step (model_epoch, generation): sends send[r] to rank r and expects recv[r] from it
 * (arrays of length ranks). A step commits when every rank's chunk is in and verified; chunks
 * of an older step are rejected and counted (pact_stats.stale_rejected). One step at a time.
 * A rank found lost does not fail this call: its chunk is not sent, every other rank's is, and
 * pact_group_wait reports PACT_ERR_PEER_LOST; a chunk expected from a rank ends PACT_ERR_PEER_LOST
 * as soon as that rank is lost. */
pact_status_t pact_group_step(pact_group_t group, uint64_t model_epoch, uint32_t generation,
                              const pact_block_t* send, const pact_block_t* recv,
                              uint64_t deadline_us);
/** Blocking until the step is final: PACT_OK when every chunk committed, else the first failure,
 * returned as soon as a chunk failed (the chunks still open are then aborted, not waited for to
 * their deadlines). Either way the step's send and recv blocks are free when it returns: an
 * aborted chunk whose receive was already landing is waited for, within timeout_ms
 * (PACT_ERR_BUSY if an operation still touches a block then; PACT_ERR_TIMED_OUT if the step is
 * not final, in which case it may be waited for again). */
pact_status_t pact_group_wait(pact_group_t group, int timeout_ms);
void pact_group_destroy(pact_group_t group);

/* ---- counters and trace ------------------------------------------------------------------- */

typedef struct pact_stats {
  uint64_t committed;
  uint64_t aborted;
  uint64_t retried;
  uint64_t duplicates_dropped;
  uint64_t stale_rejected;
  uint64_t out_of_range;        /**< pieces or blocks refused for lying outside their range */
  uint64_t checksum_failures;
  uint64_t open_registrations;
  uint64_t open_transfers;
  uint64_t staged_bytes;        /**< receiver: bytes advertised and not yet final */
  uint64_t peak_staged_bytes;
  uint64_t credit_budget;
  uint64_t credit_stall_ns;     /**< receiver: time matched transfers waited for credit */
  uint64_t bytes_received;
  uint64_t bytes_sent;
  uint64_t faults_injected;     /**< PACT_FAULT faults this engine applied */
  /* Rail failover (docs/reliability.md): rails to peers taken out and taken back, and the pieces
   * (and their bytes) sent again because the rail they went over was taken out. */
  uint64_t rail_failovers;
  uint64_t rail_recoveries;
  uint64_t rail_resent_pieces;
  uint64_t rail_resent_bytes;
  uint64_t rail_down_us;        /**< time rails to peers spent out, counted as each comes back */
} pact_stats_t;

pact_status_t pact_stats(pact_engine_t engine, pact_stats_t* stats);

typedef struct pact_event {
  uint64_t time_ns;     /**< CLOCK_MONOTONIC */
  pact_key_t key;
  pact_peer_t peer;
  uint8_t role;         /**< 0 receiver, 1 sender */
  uint8_t state;        /**< pact_state_t entered */
  uint8_t event;        /**< what caused it (engine event number, see docs/engine.md) */
} pact_event_t;

/** Copies up to max events recorded after *cursor (0 = the oldest kept) and advances *cursor.
 * The trace is a bounded ring (PACT_TRACE_EVENTS); events overwritten before they were read are
 * skipped. Returns the number copied. */
size_t pact_trace_read(pact_engine_t engine, pact_event_t* events, size_t max, uint64_t* cursor);

#ifdef __cplusplus
}
#endif

#endif /**< PACT_PACT_H */
