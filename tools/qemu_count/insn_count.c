/*
 * insn_count: a qemu TCG plugin (qemu 7.2 plugin API, version 1) that counts the guest instructions a
 * qemu-user process executes, over all its threads, and prints the total when the guest exits.
 *
 *   qemu-aarch64 -plugin libinsn_count.so[,outfile=PATH][,inline=on] PROGRAM ...
 *
 * Output, on stderr or in PATH (overwritten): "insns=N vcpus=V mode=cb|inline", V being the number of
 * guest threads (vCPUs) that were started, then in cb mode a line "vcpu I: N" for each vCPU index that ran
 * (an index is reused by a later thread once its thread has exited).
 *
 * Counting is per translation block: a TB's instruction count is added each time the TB starts. An
 * instruction that faults in the middle of a TB leaves the rest of the TB counted but not executed; guest
 * code that does not fault (compute kernels) is counted exactly.
 *
 * Modes:
 *  - cb (default): a TB-entry callback adds to the running vCPU's own counter (one cache line per vCPU, so
 *    threads never share a counter or a line). Correct with any number of guest threads.
 *  - inline=on: the TB's count is added by generated code to one shared counter, without a helper call:
 *    faster, but the add is not atomic, so it is exact only while one guest thread runs at a time. V in the
 *    output tells whether that held; use cb mode for multithreaded guests.
 *
 * In qemu-user a new thread takes the smallest index above all live vCPUs' indices, so indices are small
 * and a slot is only reused after its thread is gone; slots past MAX_SLOTS share an atomic counter.
 */
#include <glib.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define MAX_SLOTS 256

typedef struct {
    uint64_t insns;
    char pad[64 - sizeof(uint64_t)];
} Slot;

static Slot slots[MAX_SLOTS];
static uint64_t overflow_insns;  /* vCPUs with an index >= MAX_SLOTS, atomically */
static uint64_t inline_insns;    /* inline mode's single counter */
static uint64_t vcpus_started;
static bool inline_mode;
static char *outfile;

static void tb_exec(unsigned int vcpu_index, void *udata)
{
    uint64_t n = (uintptr_t)udata;
    if (vcpu_index < MAX_SLOTS) {
        slots[vcpu_index].insns += n;
    } else {
        __atomic_fetch_add(&overflow_insns, n, __ATOMIC_RELAXED);
    }
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (inline_mode) {
        qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &inline_insns, n);
    } else {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
    }
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu_index)
{
    __atomic_fetch_add(&vcpus_started, 1, __ATOMIC_RELAXED);
}

/* Runs after qemu has stopped every vCPU and removed the other callbacks. */
static void at_exit(qemu_plugin_id_t id, void *udata)
{
    uint64_t total = __atomic_load_n(&overflow_insns, __ATOMIC_RELAXED) + inline_insns;
    for (int i = 0; i < MAX_SLOTS; i++) {
        total += __atomic_load_n(&slots[i].insns, __ATOMIC_RELAXED);
    }
    FILE *out = outfile ? fopen(outfile, "w") : stderr;
    if (!out) {
        fprintf(stderr, "insn_count: cannot write %s\n", outfile);
        out = stderr;
    }
    fprintf(out, "insns=%" PRIu64 " vcpus=%" PRIu64 " mode=%s\n", total,
            __atomic_load_n(&vcpus_started, __ATOMIC_RELAXED), inline_mode ? "inline" : "cb");
    for (int i = 0; i < MAX_SLOTS && !inline_mode; i++) {
        if (slots[i].insns) {
            fprintf(out, "vcpu %d: %" PRIu64 "\n", i, slots[i].insns);
        }
    }
    if (out != stderr) {
        fclose(out);
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv)
{
    for (int i = 0; i < argc; i++) {
        char **kv = g_strsplit(argv[i], "=", 2);
        bool ok = kv[0] && kv[1];
        if (ok && strcmp(kv[0], "outfile") == 0) {
            outfile = g_strdup(kv[1]);
        } else if (ok && strcmp(kv[0], "inline") == 0) {
            ok = qemu_plugin_bool_parse(kv[0], kv[1], &inline_mode);
        } else {
            ok = false;
        }
        g_strfreev(kv);
        if (!ok) {
            fprintf(stderr, "insn_count: unknown argument %s (want outfile=PATH or inline=on|off)\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
