// Shared pieces of the libFuzzer targets: a per-process scratch folder, the format plugin driven through its C
// ABI, and a walk over every byte a model view hands out (so ASan sees any pointer that escaped its buffer).
#pragma once

#include "error.h"
#include "plugin/host_api.h"
#include "tokenize/tokenizer.h"

#include <cellm/abi.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

extern "C" const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                       uint32_t host_abi_minor);

namespace cellm::fuzz {

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
}

// A folder of this process's own under TMPDIR (forked and parallel fuzzers never share one).
inline const std::filesystem::path& scratch() {
    static const std::filesystem::path dir = [] {
        const char* tmp = std::getenv("TMPDIR");
        std::filesystem::path d = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
                                  ("cellm-fuzz-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

// Writes `bytes` to `path`, replacing it.
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) fail("cannot write a scratch file");
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) fail("short write");
    std::fclose(f);
}

// This binary's format plugin, through the same entry point and table the host uses.
inline const cellm_format_iface& format() {
    static const cellm_format_iface* iface = [] {
        const cellm_plugin_desc* desc = cellm_plugin_entry(host_api(), CELLM_ABI_MAJOR, CELLM_ABI_MINOR);
        if (desc == nullptr || desc->kind != CELLM_PLUGIN_FORMAT) fail("no format plugin");
        return static_cast<const cellm_format_iface*>(desc->iface);
    }();
    return *iface;
}

inline volatile uint8_t sink;

inline void touch(const void* data, uint64_t len) {
    if (len == 0) return;
    if (data == nullptr) fail("NULL data with a non-zero length");
    const auto* p = static_cast<const uint8_t*>(data);
    uint8_t acc = 0;
    for (uint64_t i = 0; i < len; ++i) acc = static_cast<uint8_t>(acc ^ p[i]);
    sink = acc;
}

inline uint64_t element_size(cellm_value_type t) {
    switch (t) {
        case CELLM_VALUE_U8: case CELLM_VALUE_I8: case CELLM_VALUE_BOOL: return 1;
        case CELLM_VALUE_U16: case CELLM_VALUE_I16: return 2;
        case CELLM_VALUE_U32: case CELLM_VALUE_I32: case CELLM_VALUE_F32: return 4;
        case CELLM_VALUE_U64: case CELLM_VALUE_I64: case CELLM_VALUE_F64: return 8;
        default: return 0;
    }
}

// Reads every metadata byte and checks that each tensor lies inside the mapping (mapped memory is invisible to
// ASan, so that check is explicit), touching its first and last byte.
inline void walk_view(const cellm_model_view& view) {
    for (uint64_t i = 0; i < view.n_meta; ++i) {
        const cellm_meta_kv& kv = view.meta[i];
        touch(kv.key.data, kv.key.len);
        const cellm_meta_value& v = kv.value;
        if (v.type == CELLM_VALUE_STRING) {
            touch(v.v.str.data, v.v.str.len);
        } else if (v.type == CELLM_VALUE_ARRAY && v.v.arr.data != nullptr) {
            if (v.v.arr.elem_type == CELLM_VALUE_STRING) {
                const auto* s = static_cast<const cellm_string_ref*>(v.v.arr.data);
                for (uint64_t j = 0; j < v.v.arr.count; ++j) touch(s[j].data, s[j].len);
            } else {
                touch(v.v.arr.data, v.v.arr.count * element_size(v.v.arr.elem_type));
            }
        }
    }
    const auto* lo = static_cast<const uint8_t*>(view.mapping);
    for (uint64_t i = 0; i < view.n_tensors; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&view, i);
        touch(t->name.data, t->name.len);
        if (t->n_dims > CELLM_MAX_DIMS) fail("tensor with more than CELLM_MAX_DIMS dims");
        if (t->size == 0) continue;
        const auto* p = static_cast<const uint8_t*>(t->data);
        if (p == nullptr) fail("tensor without data");
        if (lo != nullptr && (p < lo || t->size > view.mapping_size || static_cast<uint64_t>(p - lo) > view.mapping_size - t->size)) {
            fail("tensor data outside the mapping");
        }
        sink = static_cast<uint8_t>(p[0] ^ p[t->size - 1]);
    }
}

// What the host does next with an opened file: build its tokenizer, and run it once when that succeeds.
inline void exercise_tokenizer(const cellm_model_view& view) {
    try {
        const auto tok = Tokenizer::from_model(view);
        const auto ids = tok->encode("Hello world! <|im_start|>user\n\xc3\xa9\xf0\x9f\x98\x80 123", true, true);
        StreamDecoder stream(*tok);
        for (const int32_t id : ids) stream.push(id);
        stream.flush();
        (void)tok->decode(ids);
    } catch (const Error&) {
    }
}

// Opens the file or folder at `path` through the plugin; a successful open is walked and then closed.
inline void open_and_walk(const std::filesystem::path& path) {
    const cellm_format_iface& f = format();
    uint8_t head[64] = {};
    size_t head_len = 0;
    if (std::filesystem::is_regular_file(path)) {
        if (FILE* in = std::fopen(path.c_str(), "rb")) {
            head_len = std::fread(head, 1, sizeof(head), in);
            std::fclose(in);
        }
    }
    (void)f.probe(path.c_str(), head, head_len);
    cellm_model_file* file = nullptr;
    if (cellm_status* status = f.open(path.c_str(), &file)) {
        const cellm_status_code code = host_api()->status_code(status);
        if (code == CELLM_OK || host_api()->status_message(status) == nullptr) fail("error status without code or message");
        // Internal errors are exceptions other than the plugin's own Failure leaking out of a parser.
        if (code == CELLM_ERR_INTERNAL) {
            std::fprintf(stderr, "internal error: %s\n", host_api()->status_message(status));
            fail("open returned CELLM_ERR_INTERNAL");
        }
        host_api()->status_free(status);
        return;
    }
    cellm_model_view view{};
    view.struct_size = sizeof(view);
    if (cellm_status* status = f.get_view(file, &view)) {
        host_api()->status_free(status);
        fail("get_view failed on an opened file");
    }
    walk_view(view);
    exercise_tokenizer(view);
    f.close(file);
}

}  // namespace cellm::fuzz
