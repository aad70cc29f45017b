/// The version of Cumulus, as `cumulus --version` prints it.
public enum CumulusVersion {
    /// Semantic versioning; `-dev` until the first release.
    public static let current = "0.1.0-dev"
}
