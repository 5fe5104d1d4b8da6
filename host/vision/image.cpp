// Reading a file, telling PNG from JPEG, and turning the pixels upright by the EXIF orientation as
// PIL.ImageOps.exif_transpose does (transformers' load_image calls it before convert("RGB")).
#include "vision/image.h"

#include <array>
#include <cstring>
#include <fstream>
#include <iterator>

#include "error.h"
#include "vision/codecs.h"

namespace cellm::vision {
namespace {

constexpr std::array<std::uint8_t, 8> kPngSignature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
constexpr std::array<std::uint8_t, 3> kJpegSignature = {0xFF, 0xD8, 0xFF};

bool starts_with(std::span<const std::uint8_t> bytes, std::span<const std::uint8_t> prefix) {
    return bytes.size() >= prefix.size() && std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

// The orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block, 1 (upright) when absent or unreadable:
// like PIL, a broken EXIF block leaves the image as stored rather than failing it.
int exif_orientation(std::span<const std::uint8_t> exif) {
    if (exif.size() < 8) return 1;
    const bool little = exif[0] == 'I' && exif[1] == 'I';
    if (!little && !(exif[0] == 'M' && exif[1] == 'M')) return 1;
    auto u16 = [&](std::size_t at) {
        return little ? unsigned(exif[at]) | unsigned(exif[at + 1]) << 8
                      : unsigned(exif[at]) << 8 | unsigned(exif[at + 1]);
    };
    auto u32 = [&](std::size_t at) {
        return little ? std::uint32_t{u16(at)} | std::uint32_t{u16(at + 2)} << 16
                      : std::uint32_t{u16(at)} << 16 | std::uint32_t{u16(at + 2)};
    };
    if (u16(2) != 42) return 1;
    const std::size_t ifd = u32(4);
    if (ifd > exif.size() - 2) return 1;
    const std::size_t entries = u16(ifd);
    for (std::size_t i = 0; i < entries; ++i) {
        const std::size_t entry = ifd + 2 + 12 * i;
        if (entry > exif.size() - 12) return 1;
        if (u16(entry) == 0x0112 && u16(entry + 2) == 3 && u32(entry + 4) >= 1) return static_cast<int>(u16(entry + 8));
    }
    return 1;
}

// Orientations 2..8: the stored image is mirrored and/or turned; this undoes it (PIL's FLIP_LEFT_RIGHT,
// ROTATE_180, FLIP_TOP_BOTTOM, TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90 for 2..8). Other values do nothing.
Image apply_orientation(Image in, int orientation) {
    if (orientation < 2 || orientation > 8) return in;
    const bool swap = orientation >= 5;
    Image out;
    out.width = swap ? in.height : in.width;
    out.height = swap ? in.width : in.height;
    out.rgb.resize(in.rgb.size());
    const int w = in.width;
    const int h = in.height;
    for (int y = 0; y < out.height; ++y) {
        for (int x = 0; x < out.width; ++x) {
            int sx = x;
            int sy = y;
            switch (orientation) {
                case 2: sx = w - 1 - x; break;
                case 3: sx = w - 1 - x; sy = h - 1 - y; break;
                case 4: sy = h - 1 - y; break;
                case 5: sx = y; sy = x; break;
                case 6: sx = y; sy = h - 1 - x; break;
                case 7: sx = w - 1 - y; sy = h - 1 - x; break;
                case 8: sx = w - 1 - y; sy = x; break;
            }
            const std::size_t from = 3 * (std::size_t(sy) * std::size_t(w) + std::size_t(sx));
            const std::size_t to = 3 * (std::size_t(y) * std::size_t(out.width) + std::size_t(x));
            std::memcpy(&out.rgb[to], &in.rgb[from], 3);
        }
    }
    return out;
}

}  // namespace

Image decode_image(std::span<const std::uint8_t> bytes, const std::string& name, std::uint64_t max_pixels) {
    DecodedImage decoded;
    if (starts_with(bytes, kPngSignature))
        decoded = decode_png(bytes, name, max_pixels);
    else if (starts_with(bytes, kJpegSignature))
        decoded = decode_jpeg(bytes, name, max_pixels);
    else
        throw Error("image " + name + ": not a PNG or JPEG file");
    return apply_orientation(std::move(decoded.image), exif_orientation(decoded.exif));
}

Image load_image(const std::filesystem::path& path, std::uint64_t max_pixels) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw Error("image " + path.string() + ": is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("image " + path.string() + ": cannot open the file");
    std::vector<std::uint8_t> bytes;
    try {
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::exception& e) {  // libstdc++ reports read errors (EIO, ...) by throwing from the stream buffer
        throw Error("image " + path.string() + ": cannot read the file: " + e.what());
    }
    if (in.bad()) throw Error("image " + path.string() + ": cannot read the file");
    return decode_image(bytes, path.string(), max_pixels);
}

}  // namespace cellm::vision
