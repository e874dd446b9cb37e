// Package bundle owns agentenv's bundles: a task, an eval, an env or a Harbor task folder or
// dataset packed with every file it reads, and nothing else, as an OCI artifact that any OCI
// registry stores (distribution, Harbor, GHCR, ECR, Artifact Registry).
//
// A bundle is one manifest (artifactType [ArtifactType]) whose config ([ConfigMediaType]) says
// what it is ([Config]: kind, entry, name, every file's path, digest and size) and whose one
// layer ([LayerMediaType]) is a gzipped tar of those files, made deterministically: the same
// files make the same manifest digest. [Collect] finds the files of a path as `agentenv run`
// and `env deploy` take it; [Pack] makes the blobs; [Client] pushes and pulls them through a
// local cache ([Cache]: an OCI image layout, references recorded as tags, and each bundle's
// files unpacked once, verified, under trees/), with the credentials `docker login` leaves.
//
// References are host[:port]/repo[:tag][@sha256:HEX], oci:// optional ([ParseRef]); a name
// with no host part is never one ([IsRef]), so that a local path always wins.
package bundle
