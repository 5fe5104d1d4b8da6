#include "pickle.h"

#include "formats/limits.h"
#include "plugin_host.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace cellm::safetensors_plugin {
namespace {

// torch.save's pickle holds about fifteen objects per tensor; these bounds sit far above what max_tensors tensors
// need and keep a hostile stream from growing the arena past a few hundred MB.
constexpr uint64_t max_pickle_bytes = uint64_t{256} << 20;
constexpr size_t max_objects = size_t{1} << 23;
constexpr size_t max_references = size_t{1} << 26;  // object ids held by all tuples, lists and dicts together
constexpr size_t max_global_line = 256;

enum class Kind : uint8_t { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Storage, Tensor };

const char* kind_name(Kind k) {
    switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "string";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Global: return "global";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
    }
    return "?";
}

// The only names a state dict's pickle refers to. Each is recognised by name; none is ever called.
enum class Global : uint8_t { OrderedDict, RebuildTensorV2, RebuildParameter, StorageType };

struct StorageType {
    const char* name;
    cellm_dtype type;  // CELLM_TYPE_COUNT_GGUF: known to torch, not run by cellm
    uint64_t element_size;
};
constexpr cellm_dtype not_run = CELLM_TYPE_COUNT_GGUF;
constexpr StorageType storage_types[] = {
    {"FloatStorage", CELLM_TYPE_F32, 4},  {"HalfStorage", CELLM_TYPE_F16, 2}, {"BFloat16Storage", CELLM_TYPE_BF16, 2},
    {"DoubleStorage", not_run, 8},        {"LongStorage", not_run, 8},        {"IntStorage", not_run, 4},
    {"ShortStorage", not_run, 2},         {"CharStorage", not_run, 1},        {"ByteStorage", not_run, 1},
    {"BoolStorage", not_run, 1},
};

// Tuples, lists and dicts (key, value, key, value, ...) hold ids of other objects in the arena, so shared and
// even cyclic references (a list appended to itself through the memo) cost nothing and nothing recurses.
struct Object {
    Kind kind = Kind::None;
    Global global = Global::OrderedDict;
    int64_t i = 0;  // Int, Bool; index of a Storage or a storage type; index of a Tensor's record
    double f = 0;
    std::string s;  // String; a Global's module.name
    std::vector<uint32_t> items;
};

std::string printable(std::string_view s) {
    std::string out;
    for (const char c : s.substr(0, 80)) {
        out += (c >= 0x20 && c < 0x7f) ? c : '?';
    }
    if (s.size() > 80) out += "...";
    return out;
}

// Names quoted in a message come from the file: control bytes must not break its one line.
std::string one_line(std::string s) {
    for (char& c : s) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    return s;
}

class Unpickler {
public:
    Unpickler(const uint8_t* data, uint64_t size, const std::string& where) : p_(data), size_(size), where_(where) {}

    PickledStateDict run() {
        if (size_ > max_pickle_bytes) {
            fail(CELLM_ERR_UNSUPPORTED, "pickle of " + std::to_string(size_) + " bytes is above the limit of " +
                                            std::to_string(max_pickle_bytes));
        }
        const uint32_t root = execute();
        return state_dict(root);
    }

private:
    [[noreturn]] void fail(cellm_status_code code, const std::string& message) const {
        throw plugin::Failure(code, where_ + ": " + one_line(message));
    }
    [[noreturn]] void corrupt(const std::string& message) const {
        fail(CELLM_ERR_CORRUPT, message + " (opcode at byte " + std::to_string(op_at_) + ")");
    }

    const uint8_t* take(uint64_t n) {
        if (n > size_ - at_) {
            fail(CELLM_ERR_CORRUPT, "truncated: the opcode at byte " + std::to_string(op_at_) + " needs " +
                                        std::to_string(n) + " more bytes, the pickle has " +
                                        std::to_string(size_ - at_));
        }
        const uint8_t* out = p_ + at_;
        at_ += n;
        return out;
    }
    uint64_t le(unsigned n) {
        const uint8_t* b = take(n);
        uint64_t v = 0;
        for (unsigned k = 0; k < n; ++k) v |= uint64_t{b[k]} << (8 * k);
        return v;
    }

    uint32_t make(Kind kind) {
        if (objects_.size() >= max_objects) fail(CELLM_ERR_UNSUPPORTED, "pickle holds more than " + std::to_string(max_objects) + " objects");
        objects_.emplace_back().kind = kind;
        return static_cast<uint32_t>(objects_.size() - 1);
    }
    uint32_t make_int(int64_t v, Kind kind = Kind::Int) {
        const uint32_t id = make(kind);
        objects_[id].i = v;
        return id;
    }
    void add_items(uint32_t container, const uint32_t* ids, size_t n) {
        references_ += n;
        if (references_ > max_references) fail(CELLM_ERR_UNSUPPORTED, "pickle holds more than " + std::to_string(max_references) + " references");
        auto& items = objects_[container].items;
        items.insert(items.end(), ids, ids + n);
    }

    // The stack above the innermost MARK (or the bottom): what an opcode may pop.
    size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
    uint32_t pop() {
        if (stack_.size() <= floor()) corrupt("stack underflow");
        const uint32_t id = stack_.back();
        stack_.pop_back();
        return id;
    }
    uint32_t top() {
        if (stack_.size() <= floor()) corrupt("stack underflow");
        return stack_.back();
    }
    void push(uint32_t id) { stack_.push_back(id); }
    // Everything above the innermost MARK, which is removed.
    std::vector<uint32_t> pop_to_mark() {
        if (marks_.empty()) corrupt("no MARK to pop to");
        const size_t mark = marks_.back();
        marks_.pop_back();
        std::vector<uint32_t> out(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
        stack_.resize(mark);
        return out;
    }
    uint32_t tuple(const std::vector<uint32_t>& ids) {
        const uint32_t t = make(Kind::Tuple);
        add_items(t, ids.data(), ids.size());
        return t;
    }
    Object& container(uint32_t id, Kind want, const char* op) {
        Object& o = objects_[id];
        if (o.kind != want) corrupt(std::string(op) + " on a " + kind_name(o.kind) + ", not a " + kind_name(want));
        return o;
    }
    uint32_t string(const uint8_t* b, uint64_t n) {
        const uint32_t id = make(Kind::String);
        objects_[id].s.assign(reinterpret_cast<const char*>(b), n);
        return id;
    }

    void memo_put(uint64_t index) {
        if (memo_.size() >= max_objects) fail(CELLM_ERR_UNSUPPORTED, "memo holds more than " + std::to_string(max_objects) + " entries");
        memo_[index] = top();
    }
    uint32_t memo_get(uint64_t index) {
        const auto it = memo_.find(index);
        if (it == memo_.end()) corrupt("memo entry " + std::to_string(index) + " was never stored");
        return it->second;
    }

    // Recognises `module.name` or refuses it: nothing outside this list can appear in a state dict.
    uint32_t global(std::string_view module, std::string_view name) {
        const uint32_t id = make(Kind::Global);
        Object& o = objects_[id];
        o.s = std::string(module) + "." + std::string(name);
        if (module == "collections" && name == "OrderedDict") {
            o.global = Global::OrderedDict;
            return id;
        }
        if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
            o.global = Global::RebuildTensorV2;
            return id;
        }
        if (module == "torch._utils" && name == "_rebuild_parameter") {
            o.global = Global::RebuildParameter;
            return id;
        }
        if (module == "torch") {
            for (size_t k = 0; k < std::size(storage_types); ++k) {
                if (name == storage_types[k].name) {
                    o.global = Global::StorageType;
                    o.i = static_cast<int64_t>(k);
                    return id;
                }
            }
        }
        fail(CELLM_ERR_UNSUPPORTED, "global '" + printable(module) + "." + printable(name) + "' at byte " +
                                        std::to_string(op_at_) +
                                        " is refused (a state dict needs only torch's tensor rebuilders and storage types and "
                                        "collections.OrderedDict; cellm runs no pickle code)");
    }
    std::string_view line() {
        const uint64_t left = size_ - at_;
        const auto* begin = reinterpret_cast<const char*>(p_ + at_);
        const void* nl = std::memchr(begin, '\n', static_cast<size_t>(std::min<uint64_t>(left, max_global_line + 1)));
        if (nl == nullptr) {
            if (left <= max_global_line) fail(CELLM_ERR_CORRUPT, "truncated: GLOBAL at byte " + std::to_string(op_at_) + " has no end of line");
            corrupt("GLOBAL name longer than " + std::to_string(max_global_line) + " bytes");
        }
        const auto n = static_cast<uint64_t>(static_cast<const char*>(nl) - begin);
        take(n + 1);
        return {begin, static_cast<size_t>(n)};
    }

    // BINPERSID's ('storage', StorageType, key, location, numel): torch's reference to archive/data/<key>.
    uint32_t persistent_load(uint32_t pid) {
        const Object& t = objects_[pid];
        const auto is = [&](size_t k, Kind kind) { return objects_[t.items[k]].kind == kind; };
        if (t.kind != Kind::Tuple || t.items.size() != 5 || !is(0, Kind::String) || objects_[t.items[0]].s != "storage" ||
            !is(1, Kind::Global) || objects_[t.items[1]].global != Global::StorageType || !is(2, Kind::String) ||
            !is(3, Kind::String) || !is(4, Kind::Int) || objects_[t.items[4]].i < 0) {
            fail(CELLM_ERR_UNSUPPORTED, "persistent id at byte " + std::to_string(op_at_) +
                                            " is not ('storage', torch.<Type>Storage, key, location, numel)");
        }
        const StorageType& type = storage_types[objects_[t.items[1]].i];
        const std::string& key = objects_[t.items[2]].s;
        const auto numel = static_cast<uint64_t>(objects_[t.items[4]].i);
        const auto [it, fresh] = storage_index_.try_emplace(key, storages_.size());
        if (fresh) {
            storages_.push_back({key, type.name, type.type, type.element_size, numel});
        } else if (storages_[it->second].type_name != type.name || storages_[it->second].numel != numel) {
            corrupt("storage '" + printable(key) + "' is referred to with two types or sizes");
        }
        return make_int(static_cast<int64_t>(it->second), Kind::Storage);
    }

    std::vector<int64_t> ints(uint32_t id, const char* what) {
        const Object& o = objects_[id];
        if (o.kind != Kind::Tuple) corrupt(std::string("tensor ") + what + " is a " + kind_name(o.kind) + ", not a tuple");
        std::vector<int64_t> out;
        for (const uint32_t item : o.items) {
            const Object& v = objects_[item];
            if (v.kind != Kind::Int || v.i < 0) corrupt(std::string("tensor ") + what + " holds a negative or non-integer entry");
            out.push_back(v.i);
        }
        return out;
    }

    // REDUCE: the call `callable(*args)`, rebuilt here for the allowed callables, refused for everything else.
    uint32_t reduce(uint32_t callable, uint32_t args) {
        const Object& f = objects_[callable];
        if (f.kind != Kind::Global || f.global == Global::StorageType) {
            const std::string what = f.kind == Kind::Global ? "'" + f.s + "'" : std::string("a ") + kind_name(f.kind);
            fail(CELLM_ERR_UNSUPPORTED, "REDUCE at byte " + std::to_string(op_at_) + " calls " + what +
                                            " (only torch's tensor rebuilders and collections.OrderedDict are allowed)");
        }
        const Object& a = objects_[args];
        if (a.kind != Kind::Tuple) corrupt("REDUCE's arguments are a " + std::string(kind_name(a.kind)) + ", not a tuple");
        const std::vector<uint32_t> arg = a.items;  // copied: make() below may move the arena
        // Bounded before anything is copied per tensor name (the same tuples may be reused for every name).
        const auto dims = [&](size_t k) { return arg.size() > k ? objects_[arg[k]].items.size() : 0; };
        if (f.global == Global::RebuildTensorV2 && std::max(dims(2), dims(3)) > CELLM_MAX_DIMS) {
            fail(CELLM_ERR_UNSUPPORTED, "tensor at byte " + std::to_string(op_at_) + " has " +
                                            std::to_string(std::max(dims(2), dims(3))) + " dimensions (cellm takes 1.." +
                                            std::to_string(CELLM_MAX_DIMS) + ")");
        }
        switch (f.global) {
        case Global::OrderedDict:
            if (!arg.empty()) fail(CELLM_ERR_UNSUPPORTED, "OrderedDict at byte " + std::to_string(op_at_) + " is built from arguments (torch.save passes none)");
            return make(Kind::Dict);
        case Global::RebuildTensorV2: {
            // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
            if (arg.size() != 6 && arg.size() != 7) corrupt("_rebuild_tensor_v2 takes 6 or 7 arguments, not " + std::to_string(arg.size()));
            if (objects_[arg[0]].kind != Kind::Storage) corrupt("_rebuild_tensor_v2's first argument is not a storage");
            if (objects_[arg[1]].kind != Kind::Int || objects_[arg[1]].i < 0) corrupt("_rebuild_tensor_v2's storage offset is not a non-negative integer");
            if (objects_[arg[4]].kind != Kind::Bool) corrupt("_rebuild_tensor_v2's requires_grad is not a bool");
            const Object& hooks = objects_[arg[5]];
            if (hooks.kind != Kind::Dict || !hooks.items.empty()) {
                fail(CELLM_ERR_UNSUPPORTED, "tensor at byte " + std::to_string(op_at_) + " has backward hooks (torch.save of a state dict has none)");
            }
            PickledTensor t{{}, static_cast<size_t>(objects_[arg[0]].i), static_cast<uint64_t>(objects_[arg[1]].i),
                            ints(arg[2], "size"), ints(arg[3], "stride")};
            if (t.shape.size() != t.stride.size()) corrupt("tensor size and stride differ in length");
            pending_.push_back(std::move(t));
            return make_int(static_cast<int64_t>(pending_.size() - 1), Kind::Tensor);
        }
        case Global::RebuildParameter:
            // (data, requires_grad, backward_hooks): an nn.Parameter is its tensor here.
            if (arg.size() != 3 || objects_[arg[0]].kind != Kind::Tensor) corrupt("_rebuild_parameter takes (tensor, requires_grad, hooks)");
            return arg[0];
        case Global::StorageType: break;
        }
        corrupt("unreachable REDUCE");
    }

    uint32_t execute() {
        while (true) {
            op_at_ = at_;
            if (at_ >= size_) {
                fail(CELLM_ERR_CORRUPT, "truncated: the pickle ends at byte " + std::to_string(size_) + " before its STOP opcode");
            }
            const uint8_t op = p_[at_++];
            switch (op) {
            case 0x80: {  // PROTO
                const uint64_t v = le(1);
                if (v > 5) fail(CELLM_ERR_UNSUPPORTED, "pickle protocol " + std::to_string(v) + " (1..5 are read)");
                break;
            }
            case 0x95: le(8); break;  // FRAME: a hint for buffered readers; the whole pickle is in memory
            case '.': return pop();  // STOP
            case '(': marks_.push_back(stack_.size()); break;  // MARK
            case '0': pop(); break;  // POP
            case '1': pop_to_mark(); break;  // POP_MARK
            case '2': push(top()); break;  // DUP
            case 'N': push(make(Kind::None)); break;
            case 0x88: push(make_int(1, Kind::Bool)); break;  // NEWTRUE
            case 0x89: push(make_int(0, Kind::Bool)); break;  // NEWFALSE
            case 'K': push(make_int(static_cast<int64_t>(le(1)))); break;  // BININT1
            case 'M': push(make_int(static_cast<int64_t>(le(2)))); break;  // BININT2
            case 'J': push(make_int(static_cast<int32_t>(static_cast<uint32_t>(le(4))))); break;  // BININT
            case 0x8a: case 0x8b: {  // LONG1, LONG4: little-endian two's complement of n bytes
                const uint64_t n = le(op == 0x8a ? 1 : 4);
                if (n > 8) corrupt("integer of " + std::to_string(n) + " bytes (cellm reads up to 8)");
                uint64_t v = le(static_cast<unsigned>(n));
                if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);  // sign-extend
                push(make_int(static_cast<int64_t>(v)));
                break;
            }
            case 'G': {  // BINFLOAT, big-endian
                const uint8_t* b = take(8);
                uint64_t bits = 0;
                for (int k = 0; k < 8; ++k) bits = bits << 8 | b[k];
                const uint32_t id = make(Kind::Float);
                objects_[id].f = std::bit_cast<double>(bits);
                push(id);
                break;
            }
            case 'X': { const uint64_t n = le(4); push(string(take(n), n)); break; }  // BINUNICODE
            case 0x8c: { const uint64_t n = le(1); push(string(take(n), n)); break; }  // SHORT_BINUNICODE
            case 0x8d: { const uint64_t n = le(8); push(string(take(n), n)); break; }  // BINUNICODE8
            case 'C': { const uint64_t n = le(1); push(string(take(n), n)); break; }  // SHORT_BINBYTES
            case 'B': { const uint64_t n = le(4); push(string(take(n), n)); break; }  // BINBYTES
            case ')': push(make(Kind::Tuple)); break;  // EMPTY_TUPLE
            case 't': push(tuple(pop_to_mark())); break;  // TUPLE
            case 0x85: case 0x86: case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
                std::vector<uint32_t> ids(op - 0x84u);
                for (size_t k = ids.size(); k-- > 0;) ids[k] = pop();
                push(tuple(ids));
                break;
            }
            case ']': push(make(Kind::List)); break;  // EMPTY_LIST
            case 'l': {  // LIST
                const std::vector<uint32_t> ids = pop_to_mark();
                const uint32_t list = make(Kind::List);
                add_items(list, ids.data(), ids.size());
                push(list);
                break;
            }
            case 'a': {  // APPEND
                const uint32_t value = pop();
                container(top(), Kind::List, "APPEND");
                add_items(top(), &value, 1);
                break;
            }
            case 'e': {  // APPENDS
                const std::vector<uint32_t> ids = pop_to_mark();
                container(top(), Kind::List, "APPENDS");
                add_items(top(), ids.data(), ids.size());
                break;
            }
            case '}': push(make(Kind::Dict)); break;  // EMPTY_DICT
            case 'd': {  // DICT
                const std::vector<uint32_t> ids = pop_to_mark();
                if (ids.size() % 2 != 0) corrupt("DICT with an odd number of items");
                const uint32_t dict = make(Kind::Dict);
                add_items(dict, ids.data(), ids.size());
                push(dict);
                break;
            }
            case 's': {  // SETITEM
                const uint32_t value = pop();
                const uint32_t kv[2] = {pop(), value};
                container(top(), Kind::Dict, "SETITEM");
                add_items(top(), kv, 2);
                break;
            }
            case 'u': {  // SETITEMS
                const std::vector<uint32_t> ids = pop_to_mark();
                if (ids.size() % 2 != 0) corrupt("SETITEMS with an odd number of items");
                container(top(), Kind::Dict, "SETITEMS");
                add_items(top(), ids.data(), ids.size());
                break;
            }
            case 'q': memo_put(le(1)); break;  // BINPUT
            case 'r': memo_put(le(4)); break;  // LONG_BINPUT
            case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
            case 'h': push(memo_get(le(1))); break;  // BINGET
            case 'j': push(memo_get(le(4))); break;  // LONG_BINGET
            case 'c': {  // GLOBAL "module\nname\n"
                const std::string_view module = line();
                const std::string_view name = line();
                push(global(module, name));
                break;
            }
            case 0x93: {  // STACK_GLOBAL
                const uint32_t name = pop();
                const uint32_t module = pop();
                if (objects_[name].kind != Kind::String || objects_[module].kind != Kind::String) {
                    corrupt("STACK_GLOBAL needs two strings");
                }
                // Copies: global() may move the arena.
                const std::string m = objects_[module].s, n = objects_[name].s;
                push(global(m, n));
                break;
            }
            case 'Q': push(persistent_load(pop())); break;  // BINPERSID
            case 'R': {  // REDUCE
                const uint32_t args = pop();
                const uint32_t callable = pop();
                push(reduce(callable, args));
                break;
            }
            case 'b': {  // BUILD: only an OrderedDict's attributes (a state dict's _metadata), which cellm ignores
                const uint32_t state = pop();
                const Kind target = objects_[top()].kind;
                const Kind kind = objects_[state].kind;
                if (target != Kind::Dict || (kind != Kind::Dict && kind != Kind::None)) {
                    fail(CELLM_ERR_UNSUPPORTED, "BUILD at byte " + std::to_string(op_at_) + " sets the state of a " +
                                                    kind_name(target) + " (only a state dict's own attributes are allowed)");
                }
                break;
            }
            default: {
                char text[16];
                if (op >= 0x20 && op < 0x7f) {
                    std::snprintf(text, sizeof text, "0x%02x '%c'", op, op);
                } else {
                    std::snprintf(text, sizeof text, "0x%02x", op);
                }
                fail(CELLM_ERR_UNSUPPORTED, "pickle opcode " + std::string(text) + " at byte " + std::to_string(op_at_) +
                                                " is refused (not one torch.save writes for a state dict)");
            }
            }
        }
    }

    PickledStateDict state_dict(uint32_t root) {
        const Object& dict = objects_[root];
        if (dict.kind != Kind::Dict) {
            fail(CELLM_ERR_UNSUPPORTED, "pickle holds a " + std::string(kind_name(dict.kind)) +
                                            ", not a state dict (a dict of tensor names to tensors)");
        }
        PickledStateDict out;
        if (dict.items.size() / 2 > file_limits::max_tensors) {
            fail(CELLM_ERR_CORRUPT, file_limits::exceeds("tensor count", dict.items.size() / 2, file_limits::max_tensors));
        }
        // Distinct names are distinct strings of the pickle, so the names copied below add up to less than its size.
        std::unordered_set<std::string_view> names;
        for (size_t k = 0; k + 1 < dict.items.size(); k += 2) {
            const Object& key = objects_[dict.items[k]];
            const Object& value = objects_[dict.items[k + 1]];
            if (key.kind != Kind::String) fail(CELLM_ERR_UNSUPPORTED, "state dict has a " + std::string(kind_name(key.kind)) + " key");
            if (!names.insert(key.s).second) fail(CELLM_ERR_CORRUPT, "tensor '" + printable(key.s) + "' appears twice in the state dict");
            if (value.kind != Kind::Tensor) {
                fail(CELLM_ERR_UNSUPPORTED, "entry '" + printable(key.s) + "' is a " + kind_name(value.kind) +
                                                ", not a tensor (cellm reads state dicts: tensor names to tensors)");
            }
            PickledTensor t = pending_[static_cast<size_t>(value.i)];
            t.name = key.s;
            out.tensors.push_back(std::move(t));
        }
        out.storages = std::move(storages_);
        return out;
    }

    const uint8_t* p_;
    uint64_t size_;
    const std::string& where_;
    uint64_t at_ = 0, op_at_ = 0;
    std::vector<Object> objects_;
    std::vector<uint32_t> stack_;
    std::vector<size_t> marks_;
    std::unordered_map<uint64_t, uint32_t> memo_;
    size_t references_ = 0;
    std::vector<PickledStorage> storages_;
    std::unordered_map<std::string, size_t> storage_index_;
    std::vector<PickledTensor> pending_;
};

}  // namespace

PickledStateDict read_state_dict_pickle(const uint8_t* data, uint64_t size, const std::string& where) {
    return Unpickler(data, size, where).run();
}

}  // namespace cellm::safetensors_plugin
