/* A format plugin in plain C99 built against abi/ alone, compiled several times with switches that make it
 * well-formed or broken in one specific way, so the host's discovery can be tested file by file. */
#include <cellm/abi.h>

#ifndef FAKE_MAJOR
#define FAKE_MAJOR CELLM_ABI_MAJOR
#endif
#ifndef FAKE_MINOR
#define FAKE_MINOR CELLM_ABI_MINOR
#endif

static int fake_probe(const char* path, const uint8_t* head, size_t head_len) {
    (void)path;
    (void)head;
    (void)head_len;
    return 0;
}

static const cellm_host_api* host;

static cellm_status* fake_open(const char* path, cellm_model_file** out) {
    (void)path;
    *out = NULL;
    return host->status_new(CELLM_ERR_UNSUPPORTED, "the fake format opens nothing");
}

static void fake_close(cellm_model_file* file) { (void)file; }

static cellm_status* fake_get_view(const cellm_model_file* file, cellm_model_view* out) {
    (void)file;
    (void)out;
    return host->status_new(CELLM_ERR_UNSUPPORTED, "the fake format has no view");
}

static const cellm_format_iface iface = {
#ifdef FAKE_SMALL_TABLE
    sizeof(size_t),
#else
    sizeof(cellm_format_iface),
#endif
    fake_probe, fake_open, fake_close, fake_get_view};

#ifdef FAKE_NULL_TABLE
#define FAKE_IFACE NULL
#else
#define FAKE_IFACE &iface
#endif
static const cellm_plugin_desc desc = {sizeof(cellm_plugin_desc), FAKE_MAJOR, FAKE_MINOR, CELLM_PLUGIN_FORMAT, FAKE_NAME,
                                       "0.0.1", "a plugin for discovery tests", FAKE_IFACE};

#ifndef FAKE_NO_ENTRY
CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* h, uint32_t major, uint32_t minor) {
    (void)minor;
    (void)iface;  /* unused when FAKE_NULL_TABLE hands out no table */
    host = h;
#ifdef FAKE_DECLINE
    (void)major;
    (void)desc;
    return NULL;
#else
    return major == CELLM_ABI_MAJOR ? &desc : NULL;
#endif
}
#else
CELLM_EXPORT int not_the_entry_point(void) { return (int)sizeof(desc); }
#endif
