// The key/value section of a GGUF file, exposed as cellm_meta_kv entries that point into the mapping.
#pragma once

#include "cursor.h"

#include <cellm/tensor.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace cellm::gguf_plugin {

// "u32", "string", ...; "type N" for a value GGUF does not define.
std::string name_of_value_type(uint32_t type);

// The most elements an array may hold, and what the limit is called in the error ("array length").
struct ArrayLimit {
    uint64_t max;
    const char* what;
};

class Metadata {
public:
    // Reads `count` entries at the cursor; rejects unknown types, duplicate keys, oversized arrays and anything
    // over the limits of formats/limits.h.
    void read(Cursor& cursor, uint64_t count);

    const std::vector<cellm_meta_kv>& entries() const { return entries_; }
    const cellm_meta_kv* find(std::string_view key) const;

private:
    cellm_meta_value read_value(Cursor& cursor, uint32_t type, std::string_view key);
    cellm_meta_value read_array(Cursor& cursor, int depth, const ArrayLimit& limit);

    std::vector<cellm_meta_kv> entries_;
    // Element tables of string arrays (the mapping holds length-prefixed strings, the view wants refs).
    // Moving the outer vector keeps each inner buffer in place, so the refs handed out stay valid.
    std::vector<std::vector<cellm_string_ref>> string_arrays_;
};

}  // namespace cellm::gguf_plugin
