"""Run by the test venv's interpreter (tests/venv: PyPI's `perfetto` package): reads a
.pftrace[.gz] with Perfetto's own published schema (perfetto.protos.perfetto.trace.
perfetto_trace_pb2, generated from perfetto_trace.proto upstream, not our proto/ subset) and
prints its packets as JSON: each message a dict of field name -> list of values (enums by
name, bytes as text, 64-bit integers exact), so readers see the same shape for every field.
Fields Perfetto does not know would be dropped by the parser: they are listed under
"_unknown" (the test asserts there are none)."""
import gzip
import json
import sys

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.unknown_fields import UnknownFieldSet
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def repeated(field):
    if hasattr(field, "is_repeated"):      # protobuf >= 5.29
        return field.is_repeated
    return field.label == FieldDescriptor.LABEL_REPEATED


def to_dict(msg):
    out = {}
    for field, value in msg.ListFields():
        values = value if repeated(field) else [value]
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            values = [to_dict(v) for v in values]
        elif field.type == FieldDescriptor.TYPE_ENUM:
            values = [field.enum_type.values_by_number[v].name for v in values]
        elif field.type == FieldDescriptor.TYPE_BYTES:
            values = [v.decode("utf-8", "replace") for v in values]
        out[field.name] = list(values)
    unknown = UnknownFieldSet(msg)
    if len(unknown):
        out["_unknown"] = [unknown[i].field_number for i in range(len(unknown))]
    return out


def main():
    data = open(sys.argv[1], "rb").read()
    if sys.argv[1].endswith(".gz"):
        data = gzip.decompress(data)
    trace = pb.Trace()
    trace.ParseFromString(data)
    json.dump([to_dict(p) for p in trace.packet], sys.stdout)


if __name__ == "__main__":
    main()
