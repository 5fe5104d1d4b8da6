// Standard base64 (RFC 4648, section 4: A-Z a-z 0-9 + /, padded with '=' to a multiple of 4 characters), as the
// data: URLs of images in chat requests carry it. Decoding is strict, so that damaged data is refused with a
// reason instead of turning into different bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace cellm::server {

class Base64Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The bytes `text` encodes. Throws Base64Error, saying what is wrong and at which offset, for a character outside
// the alphabet (whitespace, line breaks and URL-safe base64's - and _ included), a length that is not a multiple
// of 4, '=' anywhere but in the last one or two places, and nonzero bits after the last byte (which no encoder
// writes). Empty text gives no bytes.
std::vector<uint8_t> decode_base64(std::string_view text);

// How many bytes decode_base64 gives when `text` is valid: 3 per 4 characters, less one per trailing '='. Cheap,
// so that a size limit can be checked before decoding.
size_t base64_decoded_size(std::string_view text);

}  // namespace cellm::server
