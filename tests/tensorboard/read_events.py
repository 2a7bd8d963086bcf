#!/usr/bin/env python3
"""An independent reader of TensorBoard event files (events.out.tfevents.*).

Written from the format's description, sharing no code with cohort's
writer (src/cohort/training/summary_writer.cc): its own CRC-32C, its own
protobuf wire decoding. Each record is

    uint64 length (LE) | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)

and data is a tensorflow.Event: wall_time (1, double), step (2, int64),
file_version (3, string), summary (5: repeated Value (1): tag (1, string),
simple_value (2, float)), session_log (6: status (1, enum; START = 1)).

    read_events.py FILE...     prints one JSON object per event

Exits 1 naming the file and offset on any framing, CRC or decoding error.
"""
import json
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, pos):
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        if pos > len(buf):
            raise ValueError("truncated field %d" % number)
        yield number, wire, value


def decode_event(data):
    event = {}
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            event["file_version"] = value.decode()
        elif number == 6 and wire == 2:
            status = 0
            for n, w, v in fields(value):
                if n == 1 and w == 0:
                    status = v
            event["session_log"] = {"status": status}
        elif number == 5 and wire == 2:
            values = {}
            for n, w, v in fields(value):
                if n != 1 or w != 2:
                    continue
                tag, simple = None, None
                for n2, w2, v2 in fields(v):
                    if n2 == 1 and w2 == 2:
                        tag = v2.decode()
                    elif n2 == 2 and w2 == 5:
                        simple = struct.unpack("<f", v2)[0]
                values[tag] = simple
            event["summary"] = values
    if "summary" in event or "session_log" in event:
        event.setdefault("step", 0)  # proto3 leaves a zero step out
    return event


def read(path):
    with open(path, "rb") as f:
        buf = f.read()
    pos, events = 0, []
    while pos < len(buf):
        if pos + 12 > len(buf):
            raise ValueError("%s: truncated header at offset %d" % (path, pos))
        header = buf[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if crc != masked(header):
            raise ValueError("%s: bad length CRC at offset %d" % (path, pos))
        data = buf[pos + 12:pos + 12 + length]
        if len(data) != length or pos + 16 + length > len(buf):
            raise ValueError("%s: truncated record at offset %d" % (path, pos))
        (crc,) = struct.unpack("<I", buf[pos + 12 + length:pos + 16 + length])
        if crc != masked(data):
            raise ValueError("%s: bad data CRC at offset %d" % (path, pos))
        events.append(decode_event(data))
        pos += 16 + length
    return events


def main(argv):
    try:
        for path in argv[1:]:
            for event in read(path):
                print(json.dumps(event, sort_keys=True))
    except (OSError, ValueError) as e:
        print("read_events: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
