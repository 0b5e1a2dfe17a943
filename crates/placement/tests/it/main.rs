//! Integration tests of placement: cgroup paths in every runtime's form, real cgroup v2
//! directories with a process moved into each, and pod metadata from a loopback server that
//! answers like the kubelet, including its failures.

mod cgroups;
mod kube;
