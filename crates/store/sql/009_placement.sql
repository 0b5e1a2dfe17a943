-- causeway trace store, schema version 9: where each traced process runs. processes gains its
-- cgroup (join cgroups on node, cgroup_id) and the GPUs it may use and has open; cgroups gains
-- the container runtime, the pod uid from the cgroup path, the container's name from
-- Kubernetes, and a note when pod metadata could not be had. Applied on top of 001-008 to every
-- new file (schema.rs).

ALTER TABLE processes ADD COLUMN IF NOT EXISTS cgroup_id UBIGINT DEFAULT 0;
ALTER TABLE processes ADD COLUMN IF NOT EXISTS gpu_visible VARCHAR DEFAULT '';
ALTER TABLE processes ADD COLUMN IF NOT EXISTS gpu_devices VARCHAR DEFAULT '';
ALTER TABLE cgroups ADD COLUMN IF NOT EXISTS runtime VARCHAR DEFAULT '';
ALTER TABLE cgroups ADD COLUMN IF NOT EXISTS pod_uid VARCHAR DEFAULT '';
ALTER TABLE cgroups ADD COLUMN IF NOT EXISTS container_name VARCHAR DEFAULT '';
ALTER TABLE cgroups ADD COLUMN IF NOT EXISTS note VARCHAR DEFAULT '';
