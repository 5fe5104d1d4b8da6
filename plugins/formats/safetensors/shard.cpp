#include "shard.h"

#include "formats/limits.h"
#include "plugin_host.hpp"

#include <nlohmann/json.hpp>

#include <bit>
#include <cstring>
#include <unordered_set>

namespace cellm::safetensors_plugin {
namespace {

using nlohmann::json;

// The safetensors reference implementation refuses headers above 100 MB; so does cellm.
constexpr uint64_t max_header = 100'000'000;

cellm_dtype parse_dtype(const std::string& dtype, const std::string& where) {
    if (dtype == "F32") return CELLM_TYPE_F32;
    if (dtype == "F16") return CELLM_TYPE_F16;
    if (dtype == "BF16") return CELLM_TYPE_BF16;
    if (dtype == "U32") return CELLM_TYPE_I32;  // MLX's packed codes, raw words (mlx_quantized.h)
    throw plugin::Failure(CELLM_ERR_UNSUPPORTED, where + " has dtype '" + dtype + "' (supported: F32, F16, BF16, U32)");
}

uint32_t bf16_bits_to_f32(uint16_t h) { return uint32_t{h} << 16; }

uint32_t f16_bits_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t{h & 0x8000u} << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return sign | 0x7f800000u | (mantissa << 13);  // infinity, or NaN keeping its payload
    if (exponent != 0) return sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    // Zero or subnormal, mantissa x 2^-24: an exact product, as F32 has the range and bits for it.
    const float value = static_cast<float>(mantissa) * 0x1p-24f;
    return sign | std::bit_cast<uint32_t>(value);
}

template <uint32_t (*to_f32)(uint16_t)>
void widen(const uint8_t* src, uint64_t n, uint8_t* dst) {
    for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, sizeof h);
        const uint32_t f = to_f32(h);
        std::memcpy(dst + 4 * i, &f, sizeof f);
    }
}

uint64_t as_u64(const json& v, const std::string& what) {
    if (!v.is_number_unsigned()) throw plugin::Failure(CELLM_ERR_CORRUPT, what + " is not a non-negative integer");
    return v.get<uint64_t>();
}

}  // namespace

std::vector<ShardTensor> read_shard(const std::string& file, const uint8_t* data, uint64_t size) {
    const auto fail = [&](const std::string& message) { throw plugin::Failure(CELLM_ERR_CORRUPT, file + ": " + message); };
    if (size < 8) fail("truncated: the 8-byte header length needs 8 bytes but the file has " + std::to_string(size));
    static_assert(std::endian::native == std::endian::little, "the safetensors reader assumes a little-endian host");
    uint64_t header_len = 0;
    std::memcpy(&header_len, data, sizeof(header_len));
    if (header_len > size - 8) {
        fail("header length " + std::to_string(header_len) + " runs past the end of the file (" + std::to_string(size) +
             " bytes)");
    }
    if (header_len > max_header) fail("header length " + std::to_string(header_len) + " exceeds 100 MB");
    const auto* header = reinterpret_cast<const char*>(data + 8);
    // nlohmann keeps the last of two equal keys; a repeated tensor name must be an error instead. The limits
    // are checked as the names arrive, before the parser builds the rest of the header.
    std::unordered_set<std::string> names;
    const json::parser_callback_t unique_names = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth != 1 || event != json::parse_event_t::key) return true;
        const std::string& name = parsed.get_ref<const std::string&>();
        if (name.size() > file_limits::max_string_bytes) {
            fail(file_limits::exceeds("tensor name length", name.size(), file_limits::max_string_bytes, " bytes"));
        }
        if (!names.insert(name).second) fail("duplicate tensor '" + name + "' in the header");
        const uint64_t n_tensors = names.size() - names.count("__metadata__");
        if (n_tensors > file_limits::max_tensors) {
            fail(file_limits::exceeds("tensor count", n_tensors, file_limits::max_tensors));
        }
        return true;
    };
    json root;
    try {
        root = json::parse(header, header + header_len, unique_names);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number such as 1e605
        fail(std::string("header is not valid JSON: ") + e.what());
    }
    if (!root.is_object()) fail("header is not a JSON object");

    const uint64_t data_start = 8 + header_len;
    const uint64_t data_bytes = size - data_start;
    std::vector<ShardTensor> tensors;
    tensors.reserve(root.size());
    try {
        for (const auto& [name, entry] : root.items()) {
            if (name == "__metadata__") continue;  // free-form strings (format: "pt"); nothing cellm needs
            const std::string where = file + ": tensor '" + name + "'";
            if (!entry.is_object()) throw plugin::Failure(CELLM_ERR_CORRUPT, where + " is not a JSON object");
            const auto dtype = entry.find("dtype");
            const auto shape = entry.find("shape");
            const auto offsets = entry.find("data_offsets");
            if (dtype == entry.end() || !dtype->is_string() || shape == entry.end() || !shape->is_array() ||
                offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
                throw plugin::Failure(CELLM_ERR_CORRUPT, where + " needs a string dtype, a shape array and two data_offsets");
            }
            ShardTensor t{name, parse_dtype(dtype->get<std::string>(), where), {}, nullptr, 0};
            if (shape->empty() || shape->size() > CELLM_MAX_DIMS) {
                throw plugin::Failure(CELLM_ERR_UNSUPPORTED, where + " has " + std::to_string(shape->size()) +
                                                                 " dimensions (cellm takes 1.." +
                                                                 std::to_string(CELLM_MAX_DIMS) + ")");
            }
            uint64_t elements = 1;
            for (const json& d : *shape) {
                const uint64_t n = as_u64(d, where + " shape entry");
                if (n == 0 || n > (uint64_t{1} << 40) || elements > (uint64_t{1} << 40) / n) {
                    throw plugin::Failure(CELLM_ERR_CORRUPT, where + " has an empty or implausibly large shape");
                }
                elements *= n;
                t.shape.push_back(static_cast<int64_t>(n));
            }
            const uint64_t begin = as_u64((*offsets)[0], where + " data_offsets[0]");
            const uint64_t end = as_u64((*offsets)[1], where + " data_offsets[1]");
            if (begin > end || end > data_bytes) {
                throw plugin::Failure(CELLM_ERR_CORRUPT,
                                      where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                          ") lie outside the " + std::to_string(data_bytes) +
                                          " data bytes after the header");
            }
            t.size = elements * static_cast<uint64_t>(cellm_dtype_type_size(t.type));
            if (end - begin != t.size) {
                throw plugin::Failure(CELLM_ERR_CORRUPT, where + " data_offsets span " + std::to_string(end - begin) +
                                                             " bytes, its shape and dtype need " + std::to_string(t.size));
            }
            t.data = data + data_start + begin;
            tensors.push_back(std::move(t));
        }
    } catch (const json::exception& e) {
        fail(std::string("malformed header: ") + e.what());
    }
    return tensors;
}

void widen_to_f32(cellm_dtype type, const uint8_t* src, uint64_t n, uint8_t* dst) {
    switch (type) {
    case CELLM_TYPE_BF16: return widen<bf16_bits_to_f32>(src, n, dst);
    case CELLM_TYPE_F16: return widen<f16_bits_to_f32>(src, n, dst);
    default:
        throw plugin::Failure(CELLM_ERR_INTERNAL, "widen_to_f32: type " + std::to_string(type) + " is not BF16/F16");
    }
}

}  // namespace cellm::safetensors_plugin
