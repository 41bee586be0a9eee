"""Generated from proto/disq/v1/*.proto by scripts/gen_proto.sh. Do not edit; regenerate."""
