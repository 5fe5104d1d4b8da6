// The decoders behind decode_image (image.cpp): one file per format. Each returns the pixels already in 8-bit
// RGB as PIL's convert("RGB") gives them, and the file's EXIF block for the orientation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vision/image.h"

namespace cellm::vision {

struct DecodedImage {
    Image image;
    std::vector<std::uint8_t> exif;  // TIFF-structured EXIF data (JPEG APP1 less "Exif\0\0", PNG eXIf); may be empty
};

// Both throw cellm::Error("image NAME: ...") on any failure and check max_pixels before allocating pixels.
DecodedImage decode_png(std::span<const std::uint8_t> bytes, const std::string& name, std::uint64_t max_pixels);
DecodedImage decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, std::uint64_t max_pixels);

}  // namespace cellm::vision
