// Image files as 8-bit RGB, as a transformers image processor sees a file it is given: load_image (PIL's PNG and
// JPEG readers, the EXIF orientation applied by ImageOps.exif_transpose, convert("RGB"), which drops alpha), then
// the processor's convert_to_rgb, which turns a PNG's transparent colour key white (png_decoder.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace cellm::vision {

// Interleaved RGB, row-major, no padding: pixel (x, y) is rgb[3 * (y * width + x) + channel].
struct Image {
    int width = 0;
    int height = 0;
    std::vector<std::uint8_t> rgb;
};

// PIL refuses images over twice its MAX_IMAGE_PIXELS (89478485) as decompression bombs; cellm stops at that
// warning threshold itself (268 MB of RGB), before allocating any pixel memory.
inline constexpr std::uint64_t kMaxImagePixels = 89478485;

// Reads a PNG or JPEG file (told apart by their signatures, not the file name). Every failure (missing file,
// truncated or corrupt data, another format, more than max_pixels pixels) throws cellm::Error naming the file.
Image load_image(const std::filesystem::path& path, std::uint64_t max_pixels = kMaxImagePixels);

// The same from bytes in memory; `name` is what error messages call them.
Image decode_image(std::span<const std::uint8_t> bytes, const std::string& name,
                   std::uint64_t max_pixels = kMaxImagePixels);

}  // namespace cellm::vision
